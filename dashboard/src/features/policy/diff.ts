/**
 * A line diff of two texts by their longest common subsequence of lines: what the
 * editor would change in the stored bundle.
 */

export type DiffKind = 'same' | 'added' | 'removed';

export type DiffLine = {
  kind: DiffKind;
  text: string;
  /** The line's number in the old text (absent for an added line). */
  oldLine?: number;
  /** The line's number in the new text (absent for a removed line). */
  newLine?: number;
};

/** A run of unchanged lines left out of a shown diff. */
export type DiffGap = { kind: 'gap'; count: number };

/** Beyond this many cells of the table the middle is shown as removed then added. */
const MAX_CELLS = 4_000_000;

export function splitLines(text: string): string[] {
  if (text === '') return [];
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  // A final newline ends the last line; it does not start another.
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

/** Every line of `before` and `after`, marked same, removed or added, in order. */
export function lineDiff(before: string, after: string): DiffLine[] {
  const a = splitLines(before);
  const b = splitLines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }

  const out: DiffLine[] = [];
  for (let i = 0; i < start; i++) out.push({ kind: 'same', text: a[i], oldLine: i + 1, newLine: i + 1 });
  out.push(...middle(a, b, start, endA, endB));
  for (let i = endA, j = endB; i < a.length; i++, j++) {
    out.push({ kind: 'same', text: a[i], oldLine: i + 1, newLine: j + 1 });
  }
  return out;
}

function middle(a: string[], b: string[], start: number, endA: number, endB: number): DiffLine[] {
  const n = endA - start;
  const m = endB - start;
  const out: DiffLine[] = [];
  if (n * m > MAX_CELLS) {
    for (let i = start; i < endA; i++) out.push({ kind: 'removed', text: a[i], oldLine: i + 1 });
    for (let j = start; j < endB; j++) out.push({ kind: 'added', text: b[j], newLine: j + 1 });
    return out;
  }
  // lcs[i * (m + 1) + j]: the LCS length of a[start + i ..] and b[start + j ..].
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * width + j] =
        a[start + i] === b[start + j]
          ? lcs[(i + 1) * width + j + 1] + 1
          : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[start + i] === b[start + j]) {
      out.push({ kind: 'same', text: a[start + i], oldLine: start + i + 1, newLine: start + j + 1 });
      i++;
      j++;
    } else if (lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
      out.push({ kind: 'removed', text: a[start + i], oldLine: start + i + 1 });
      i++;
    } else {
      out.push({ kind: 'added', text: b[start + j], newLine: start + j + 1 });
      j++;
    }
  }
  for (; i < n; i++) out.push({ kind: 'removed', text: a[start + i], oldLine: start + i + 1 });
  for (; j < m; j++) out.push({ kind: 'added', text: b[start + j], newLine: start + j + 1 });
  return out;
}

/** Whether the diff changes anything. */
export function hasChanges(lines: DiffLine[]): boolean {
  return lines.some((line) => line.kind !== 'same');
}

/** The changed lines with `context` unchanged lines around each; longer runs become gaps. */
export function withContext(lines: DiffLine[], context = 3): (DiffLine | DiffGap)[] {
  const keep = new Array<boolean>(lines.length).fill(false);
  lines.forEach((line, index) => {
    if (line.kind === 'same') return;
    for (let k = Math.max(0, index - context); k <= Math.min(lines.length - 1, index + context); k++) keep[k] = true;
  });
  const out: (DiffLine | DiffGap)[] = [];
  let skipped = 0;
  lines.forEach((line, index) => {
    if (keep[index]) {
      if (skipped) out.push({ kind: 'gap', count: skipped });
      skipped = 0;
      out.push(line);
    } else {
      skipped++;
    }
  });
  if (skipped) out.push({ kind: 'gap', count: skipped });
  return out;
}
