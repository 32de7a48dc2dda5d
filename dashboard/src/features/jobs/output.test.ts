import { describe, expect, it } from 'vitest';

import { outputView } from './output';
import type { JobDetail } from './types';

const job = (fields: Partial<JobDetail>): JobDetail => ({ id: 'j', state: 'SUCCEEDED', ...fields });

describe('outputView', () => {
  it('withholds a quarantined output, whatever field says so', () => {
    expect(outputView(job({ state: 'OUTPUT_QUARANTINED' })).kind).toBe('quarantined');
    expect(outputView(job({ output_safety: { quarantined: true } })).kind).toBe('quarantined');
    expect(outputView(job({ output_decision: 'DENY', result: { x: 1 } })).kind).toBe('quarantined');
    expect(outputView(job({ output_safety: { decision: 'quarantine', reason: 'why' } }))).toEqual({
      kind: 'quarantined',
      reason: 'why',
    });
  });

  it('says a redacted output is redacted', () => {
    expect(outputView(job({ output_decision: 'REDACT', result: { x: 1 } })).kind).toBe('redacted');
  });

  it('says a too large result is not inline', () => {
    expect(outputView(job({ result_too_large: true, result_size_bytes: 600000, result_ptr: 'redis://res:j' }))).toEqual({
      kind: 'too_large',
      bytes: 600000,
      pointer: 'redis://res:j',
    });
  });

  it('shows a succeeded job result, and nothing for others', () => {
    expect(outputView(job({ result: { ok: true }, output_decision: 'ALLOW' }))).toEqual({ kind: 'shown', value: { ok: true } });
    expect(outputView(job({ result: null }))).toEqual({ kind: 'unavailable' });
    expect(outputView(job({ state: 'FAILED' }))).toEqual({ kind: 'not_succeeded', state: 'FAILED' });
  });
});
