import { describe, expect, it } from 'vitest';

import {
  addPage,
  changedCount,
  emptyRun,
  lastHours,
  latencyBars,
  replayBody,
  toLocalInput,
  toRfc3339,
  windowProblem,
} from './api';

describe('windows', () => {
  it('turns a datetime-local value into RFC 3339 in UTC', () => {
    const local = '2026-03-01T09:30';
    expect(toRfc3339(local)).toBe(new Date(2026, 2, 1, 9, 30).toISOString());
    expect(toRfc3339(local)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    expect(toRfc3339('')).toBe('');
    expect(toRfc3339('not a time')).toBe('');
  });

  it('writes a time back as a datetime-local value', () => {
    expect(toLocalInput(new Date(2026, 0, 5, 7, 4, 59))).toBe('2026-01-05T07:04');
  });

  it('ends the last hours at the next minute', () => {
    const w = lastHours(24, new Date(2026, 0, 2, 10, 15, 30));
    expect(w).toEqual({ from: '2026-01-01T10:16', to: '2026-01-02T10:16' });
  });

  it('refuses an empty, reversed or too wide window', () => {
    expect(windowProblem({ from: '', to: '2026-01-02T00:00' })).toMatch(/start/);
    expect(windowProblem({ from: '2026-01-02T00:00', to: '2026-01-01T00:00' })).toMatch(/before/);
    expect(windowProblem({ from: '2026-01-01T00:00', to: '2026-01-09T00:00' })).toMatch(/7 days/);
    expect(windowProblem({ from: '2026-01-01T00:00', to: '2026-01-08T00:00' })).toBe('');
  });
});

describe('replay', () => {
  const base = { from: '2026-01-01T00:00', to: '2026-01-02T00:00', topicPattern: '', originalDecision: '' };

  it('names a draft bundle, or sends pasted content, with the window in RFC 3339', () => {
    expect(replayBody({ ...base, candidate: { kind: 'bundle', bundleId: 'drafts/a' } })).toEqual({
      from: toRfc3339(base.from),
      to: toRfc3339(base.to),
      max_jobs: 1000,
      limit: 1000,
      candidate_bundle_id: 'drafts/a',
    });
    const pasted = replayBody(
      { ...base, topicPattern: ' job.x.* ', originalDecision: 'ALLOW', candidate: { kind: 'content', content: 'rules: []' } },
      'cur-1',
    );
    expect(pasted).toMatchObject({
      candidate_content: 'rules: []',
      filters: { topic_pattern: 'job.x.*', original_decision: 'ALLOW' },
      cursor: 'cur-1',
    });
    expect(pasted).not.toHaveProperty('candidate_bundle_id');
  });

  it('adds up the counts and changes of the calls read', () => {
    const one = addPage(emptyRun(), {
      summary: { total_jobs: 3, evaluated: 3, escalated: 2, relaxed: 0, unchanged: 1, errored: 0, scanned: 4 },
      changes: [{ job_id: 'a' }, { job_id: 'b' }],
      rule_hits: [{ rule_id: 'r', decision: 'DENY', count: 2 }],
      warnings: ['velocity', 'stopped at the max_jobs bound after 4 jobs: continue with next_cursor'],
      next_cursor: 'c1',
      stopped_by: 'max_jobs',
    });
    const two = addPage(one, {
      summary: { total_jobs: 1, evaluated: 1, escalated: 0, relaxed: 1, unchanged: 0, errored: 0, scanned: 1 },
      changes: [{ job_id: 'c' }],
      rule_hits: [{ rule_id: 'r', decision: 'DENY', count: 1 }],
      warnings: ['velocity'],
      next_cursor: null,
      stopped_by: null,
    });
    expect(two.totals).toMatchObject({ total_jobs: 4, escalated: 2, relaxed: 1, scanned: 5 });
    expect(changedCount(two.totals)).toBe(3);
    expect(two.changes.map((c) => c.job_id)).toEqual(['a', 'b', 'c']);
    expect(two.ruleHits).toEqual([{ rule_id: 'r', decision: 'DENY', count: 3 }]);
    expect(two.warnings).toEqual(['velocity']);
    expect(two.nextCursor).toBeNull();
  });
});

describe('latency histogram', () => {
  it('turns the cumulative buckets into counts per bucket', () => {
    const bars = latencyBars([
      { le_ms: 1000, count: 1 },
      { le_ms: 10000, count: 3 },
      { le_ms: 60000, count: 3 },
      { le_ms: null, count: 5 },
    ]);
    expect(bars.map((b) => b.count)).toEqual([1, 2, 0, 2]);
    expect(bars.map((b) => b.cumulative)).toEqual([1, 3, 3, 5]);
    expect(bars.map((b) => b.label)).toEqual(['up to 1 s', '1 s to 10 s', '10 s to 1 min', 'over 1 min']);
  });
});
