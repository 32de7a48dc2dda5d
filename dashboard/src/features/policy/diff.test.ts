import { describe, expect, it } from 'vitest';

import { hasChanges, lineDiff, splitLines, withContext } from './diff';

const kinds = (before: string, after: string) => lineDiff(before, after).map((l) => `${l.kind[0]}:${l.text}`);

describe('lineDiff', () => {
  it('marks nothing changed for equal texts', () => {
    const lines = lineDiff('a\nb\n', 'a\nb\n');
    expect(lines.map((l) => l.kind)).toEqual(['same', 'same']);
    expect(hasChanges(lines)).toBe(false);
  });

  it('finds an added line with its number in the new text', () => {
    const lines = lineDiff('a\nc', 'a\nb\nc');
    expect(lines).toEqual([
      { kind: 'same', text: 'a', oldLine: 1, newLine: 1 },
      { kind: 'added', text: 'b', newLine: 2 },
      { kind: 'same', text: 'c', oldLine: 2, newLine: 3 },
    ]);
  });

  it('finds a removed line with its number in the old text', () => {
    expect(lineDiff('a\nb\nc', 'a\nc')[1]).toEqual({ kind: 'removed', text: 'b', oldLine: 2 });
  });

  it('shows a changed line as removed then added, keeping the common lines', () => {
    expect(kinds('rules:\n  - id: x\n    decision: allow\n', 'rules:\n  - id: x\n    decision: deny\n')).toEqual([
      's:rules:',
      's:  - id: x',
      'r:    decision: allow',
      'a:    decision: deny',
    ]);
  });

  it('keeps the longest common subsequence in the middle', () => {
    expect(kinds('a\nb\nc\nd\ne', 'a\nx\nc\ny\ne')).toEqual(['s:a', 'r:b', 'a:x', 's:c', 'r:d', 'a:y', 's:e']);
  });

  it('diffs from and to an empty text', () => {
    expect(kinds('', 'a\nb')).toEqual(['a:a', 'a:b']);
    expect(kinds('a\nb\n', '')).toEqual(['r:a', 'r:b']);
    expect(lineDiff('', '')).toEqual([]);
  });

  it('reads CRLF as LF and a final newline as the end of the last line', () => {
    expect(splitLines('a\r\nb\r\n')).toEqual(['a', 'b']);
    expect(hasChanges(lineDiff('a\r\nb\r\n', 'a\nb'))).toBe(false);
  });

  it('leaves long unchanged runs out as gaps', () => {
    const before = Array.from({ length: 20 }, (_, i) => `line ${i + 1}`).join('\n');
    const after = before.replace('line 10', 'line ten');
    const rows = withContext(lineDiff(before, after), 2);
    expect(rows[0]).toEqual({ kind: 'gap', count: 7 });
    expect(rows.filter((r) => r.kind !== 'gap').map((r) => ('text' in r ? r.text : ''))).toEqual([
      'line 8',
      'line 9',
      'line 10',
      'line ten',
      'line 11',
      'line 12',
    ]);
    expect(rows[rows.length - 1]).toEqual({ kind: 'gap', count: 8 });
  });
});
