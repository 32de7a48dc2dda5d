import { Fragment, useMemo } from 'react';

import { hasChanges, lineDiff, withContext, type DiffKind } from '../diff';

const WORDS: Record<DiffKind, { marker: string; word: string }> = {
  added: { marker: '+', word: 'Added' },
  removed: { marker: '−', word: 'Removed' },
  same: { marker: ' ', word: 'Unchanged' },
};

export type DiffViewProps = {
  /** The stored content. */
  before: string;
  /** The editor's text. */
  after: string;
  /** What `before` is, for the caption, e.g. "the stored bundle (in force)". */
  beforeLabel: string;
};

/** The editor's text against the stored content, line by line, each change in words. */
export function DiffView({ before, after, beforeLabel }: DiffViewProps) {
  const lines = useMemo(() => lineDiff(before, after), [before, after]);
  if (!hasChanges(lines)) {
    return <p className="muted">No changes: the editor holds {beforeLabel} as it is.</p>;
  }
  const added = lines.filter((l) => l.kind === 'added').length;
  const removed = lines.filter((l) => l.kind === 'removed').length;
  const rows = withContext(lines);
  return (
    <div className="table-wrap">
      <table className="data-table policy-diff">
        <caption>
          The editor against {beforeLabel}: {added} {added === 1 ? 'line' : 'lines'} added, {removed}{' '}
          {removed === 1 ? 'line' : 'lines'} removed
        </caption>
        <thead>
          <tr>
            <th scope="col">Change</th>
            <th scope="col" className="num">
              Stored line
            </th>
            <th scope="col" className="num">
              Editor line
            </th>
            <th scope="col">Text</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((row, index) => {
            if (row.kind === 'gap') {
              return (
                <tr key={`gap-${index}`} className="policy-diff-gap">
                  <td colSpan={4} className="muted">
                    {row.count} unchanged {row.count === 1 ? 'line' : 'lines'}
                  </td>
                </tr>
              );
            }
            const { marker, word } = WORDS[row.kind];
            return (
              <tr key={`${row.kind}-${row.oldLine ?? ''}-${row.newLine ?? ''}`} className={`policy-diff-${row.kind}`}>
                <td>
                  <Fragment>
                    <span className="policy-diff-marker" aria-hidden="true">
                      {marker}
                    </span>{' '}
                    {word}
                  </Fragment>
                </td>
                <td className="num">{row.oldLine ?? ''}</td>
                <td className="num">{row.newLine ?? ''}</td>
                <td>
                  <code className="policy-diff-text">{row.text}</code>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
