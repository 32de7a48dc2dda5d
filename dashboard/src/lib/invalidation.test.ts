import { afterEach, describe, expect, it, vi } from 'vitest';

import { InvalidationThrottle, jobIdOf, keysForEvent } from './invalidation';

describe('keysForEvent', () => {
  it('marks job lists, approvals, the overview and the job itself stale on a job event', () => {
    for (const [type, payload] of [
      ['job.submit', 'jobRequest'],
      ['job.result', 'jobResult'],
      ['job.progress', 'jobProgress'],
      ['job.cancel', 'jobCancel'],
    ] as const) {
      expect(keysForEvent({ id: '1', type, data: { [payload]: { jobId: 'j-1' } } })).toEqual([
        ['jobs'],
        ['approvals'],
        ['overview'],
        ['job', 'j-1'],
      ]);
    }
  });

  it('adds the DLQ for job.dlq', () => {
    expect(keysForEvent({ id: '1', type: 'job.dlq', data: { jobResult: { jobId: 'j-2' } } })).toEqual([
      ['jobs'],
      ['approvals'],
      ['overview'],
      ['job', 'j-2'],
      ['dlq'],
    ]);
  });

  it('marks runs and the run stale on workflow.run', () => {
    const data = { type: 'workflow.run', runId: 'r-1', workflowId: 'wf', tenantId: 'default', status: 'running', events: [] };
    expect(keysForEvent({ id: '1', type: 'workflow.run', data })).toEqual([['runs'], ['run', 'r-1']]);
  });

  it('marks workers stale on a heartbeat, and nothing for other types', () => {
    expect(keysForEvent({ id: '1', type: 'worker.heartbeat', data: { heartbeat: {} } })).toEqual([['workers']]);
    expect(keysForEvent({ id: '1', type: 'system.alert', data: {} })).toEqual([]);
  });

  it('finds no job id in frames that carry none', () => {
    expect(jobIdOf(null)).toBe('');
    expect(jobIdOf('text')).toBe('');
    expect(jobIdOf({ jobResult: { jobId: 5 } })).toBe('');
  });
});

describe('InvalidationThrottle', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('invalidates a key at once, then at most once per window, never losing the last', () => {
    vi.useFakeTimers();
    const invalidate = vi.fn();
    const throttle = new InvalidationThrottle(invalidate, 500);

    throttle.request(['jobs']);
    expect(invalidate).toHaveBeenCalledTimes(1);
    for (let i = 0; i < 20; i++) throttle.request(['jobs']);
    throttle.request(['job', 'a']);
    expect(invalidate).toHaveBeenCalledTimes(2); // another key is not held back

    vi.advanceTimersByTime(499);
    expect(invalidate).toHaveBeenCalledTimes(2);
    vi.advanceTimersByTime(1);
    expect(invalidate).toHaveBeenCalledTimes(3); // the trailing one for the burst
    expect(invalidate.mock.calls.map((c) => c[0])).toEqual([['jobs'], ['job', 'a'], ['jobs']]);

    vi.advanceTimersByTime(5000);
    expect(invalidate).toHaveBeenCalledTimes(3);
    throttle.dispose();
  });
});
