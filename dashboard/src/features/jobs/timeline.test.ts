import { describe, expect, it } from 'vitest';

import { jobTimeline } from './timeline';

describe('jobTimeline', () => {
  it('orders what happened by time and names each step', () => {
    const entries = jobTimeline(
      {
        id: 'j',
        state: 'SUCCEEDED',
        topic: 'job.echo',
        created_at: '2026-01-01T10:00:00Z',
        started_at: '2026-01-01T10:00:09Z',
        completed_at: '2026-01-01T10:00:10Z',
        approval_at: '2026-01-01T10:00:05Z',
        approval_status: 'APPROVED',
        approval_by: 'ops',
        decisions: [{ action: 'REQUIRE_APPROVAL', rule_id: 'big', evaluated_at: '2026-01-01T10:00:01Z', reason: 'amount' }],
      },
      // The same decision from /decisions is shown once.
      [{ action: 'REQUIRE_APPROVAL', rule_id: 'big', evaluated_at: '2026-01-01T10:00:01Z', reason: 'amount' }],
    );
    expect(entries.map((e) => e.what)).toEqual([
      'Submitted',
      'Policy: REQUIRE_APPROVAL (rule big)',
      'Approval approved by ops',
      'Running',
      'Finished: SUCCEEDED',
    ]);
  });

  it('shows where an open job is now', () => {
    const entries = jobTimeline({ id: 'j', state: 'RUNNING', created_at: '2026-01-01T10:00:00Z', updated_at: '2026-01-01T10:00:03Z' });
    expect(entries.map((e) => e.what)).toEqual(['Submitted', 'Now RUNNING']);
  });
});
