import { useId, useRef, type ChangeEvent } from 'react';

import { lineRange, type BundleProblem } from '../validation';

export type EditorProps = {
  label: string;
  value: string;
  onChange: (value: string) => void;
  /** The gateway's complaint about this text; marked at its line when it names one. */
  problem?: BundleProblem | null;
  readOnly?: boolean;
  rows?: number;
};

/** The YAML of a bundle in a plain textarea, with line numbers beside it. */
export function Editor({ label, value, onChange, problem, readOnly = false, rows = 18 }: EditorProps) {
  const id = useId();
  const errorId = useId();
  const text = useRef<HTMLTextAreaElement>(null);
  const gutter = useRef<HTMLDivElement>(null);
  const count = Math.max(1, value.split('\n').length);
  const line = problem?.line;

  function syncScroll() {
    if (gutter.current && text.current) gutter.current.scrollTop = text.current.scrollTop;
  }

  function goToLine(target: number) {
    const area = text.current;
    if (!area) return;
    const [start, end] = lineRange(area.value, target);
    area.focus();
    area.setSelectionRange(start, end);
    const height = Number.parseFloat(window.getComputedStyle(area).lineHeight) || 20;
    area.scrollTop = Math.max(0, (target - 3) * height);
    syncScroll();
  }

  return (
    <div className="policy-editor-field">
      <label htmlFor={id}>{label}</label>
      <div className={`policy-editor${problem ? ' policy-editor-invalid' : ''}`}>
        <div className="policy-gutter" ref={gutter} aria-hidden="true" data-testid="editor-gutter">
          {Array.from({ length: count }, (_, index) => {
            const number = index + 1;
            const bad = number === line;
            return (
              <div key={number} className={bad ? 'policy-gutter-line policy-gutter-error' : 'policy-gutter-line'} data-line={number}>
                {bad && <span className="policy-gutter-mark">⚠ </span>}
                {number}
              </div>
            );
          })}
        </div>
        <textarea
          ref={text}
          id={id}
          className="policy-editor-text"
          value={value}
          rows={rows}
          wrap="off"
          spellCheck={false}
          autoCapitalize="off"
          autoCorrect="off"
          readOnly={readOnly}
          aria-invalid={problem ? true : undefined}
          aria-describedby={problem ? errorId : undefined}
          onScroll={syncScroll}
          onChange={(event: ChangeEvent<HTMLTextAreaElement>) => onChange(event.target.value)}
        />
      </div>
      {problem && (
        <div className="policy-editor-error" role="alert">
          <p id={errorId}>
            <span aria-hidden="true">⚠ </span>
            <strong>{line ? `Line ${line}${problem.rule ? `, rule ${problem.rule}` : ''}:` : 'Not valid:'}</strong>{' '}
            {problem.message}
          </p>
          {line && (
            <button type="button" onClick={() => goToLine(line)}>
              Go to line {line}
            </button>
          )}
        </div>
      )}
    </div>
  );
}
