/** Where a refused bundle is wrong: the line and rule a POLICY_VALIDATION_FAILED answer names. */

import { ApiError } from '@/lib/api';

export type BundleProblem = {
  /** The 1-based line of the YAML, when the answer names one. */
  line?: number;
  /** The rule's id, when the answer names one. */
  rule?: string;
  /** The whole message, as the gateway sent it. */
  message: string;
};

export const VALIDATION_FAILED = 'POLICY_VALIDATION_FAILED';

/** Reads "invalid policy bundle: line 7, rule 'x': rules[1].decision: ..." into its parts. */
export function parseProblem(message: string): BundleProblem {
  const line = /\bline (\d+)\b/i.exec(message);
  const rule = /\brule '([^']*)'/i.exec(message);
  const number = line ? Number(line[1]) : NaN;
  return {
    message,
    ...(Number.isInteger(number) && number > 0 ? { line: number } : {}),
    ...(rule ? { rule: rule[1] } : {}),
  };
}

/** The character range [start, end) of line `line` (1-based) in `text`; the last line when beyond. */
export function lineRange(text: string, line: number): [number, number] {
  let start = 0;
  for (let current = 1; current < line; current++) {
    const next = text.indexOf('\n', start);
    if (next === -1) break;
    start = next + 1;
  }
  const end = text.indexOf('\n', start);
  return [start, end === -1 ? text.length : end];
}

/** A 400 POLICY_VALIDATION_FAILED as a problem to mark in the editor; anything else as null. */
export function problemOf(error: unknown): BundleProblem | null {
  if (error instanceof ApiError && error.status === 400 && error.code === VALIDATION_FAILED) {
    return parseProblem(error.message);
  }
  return null;
}
