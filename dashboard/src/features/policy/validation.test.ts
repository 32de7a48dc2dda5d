import { describe, expect, it } from 'vitest';

import { ApiError } from '@/lib/api';

import { lineRange, parseProblem, problemOf } from './validation';

describe('parseProblem', () => {
  it('reads the line and the rule of the gateway message', () => {
    const message = "invalid policy bundle: line 7, rule 'second': rules[1].match.topics: Input should be a valid list";
    expect(parseProblem(message)).toEqual({ line: 7, rule: 'second', message });
  });

  it('keeps a message without a line as it is', () => {
    expect(parseProblem('invalid policy bundle: not a mapping')).toEqual({ message: 'invalid policy bundle: not a mapping' });
  });

  it('is only a validation failure for a 400 POLICY_VALIDATION_FAILED', () => {
    const bad = new ApiError(400, { error: 'invalid policy bundle: line 3: oops', code: 'POLICY_VALIDATION_FAILED' });
    expect(problemOf(bad)?.line).toBe(3);
    expect(problemOf(new ApiError(403, { error: 'line 3', code: 'forbidden' }))).toBeNull();
    expect(problemOf(new Error('line 3'))).toBeNull();
  });
});

describe('lineRange', () => {
  it('finds a line of the text', () => {
    const text = 'one\ntwo\nthree';
    expect(lineRange(text, 1)).toEqual([0, 3]);
    expect(text.slice(...lineRange(text, 2))).toBe('two');
    expect(text.slice(...lineRange(text, 3))).toBe('three');
    expect(text.slice(...lineRange(text, 9))).toBe('three');
  });
});
