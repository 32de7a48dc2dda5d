import { useId } from 'react';

import type { LocalWindow } from '../api';

/** From and to of a window, in local time; the gateway gets them as RFC 3339. */
export function WindowFields({
  value,
  onChange,
  hint,
  legend = 'Window',
}: {
  value: LocalWindow;
  onChange: (w: LocalWindow) => void;
  hint?: string;
  legend?: string;
}) {
  const hintId = useId();
  return (
    <fieldset className="govern-fieldset">
      <legend>{legend}</legend>
      <div className="filters">
        <label className="field">
          From
          <input
            type="datetime-local"
            value={value.from}
            aria-describedby={hint ? hintId : undefined}
            onChange={(e) => onChange({ from: e.target.value, to: value.to })}
          />
        </label>
        <label className="field">
          To
          <input
            type="datetime-local"
            value={value.to}
            aria-describedby={hint ? hintId : undefined}
            onChange={(e) => onChange({ from: value.from, to: e.target.value })}
          />
        </label>
      </div>
      {hint && (
        <p id={hintId} className="govern-muted govern-hint">
          {hint}
        </p>
      )}
    </fieldset>
  );
}
