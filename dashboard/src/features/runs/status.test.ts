import { describe, expect, it } from 'vitest';

import {
  approvalsAwaited,
  awaitsApproval,
  isTerminal,
  orderedChildren,
  OPEN_RUN_LIVE_POLL_MS,
  pollWhileOpen,
  runPollInterval,
  statusTone,
  statusWords,
} from './status';

describe('run statuses', () => {
  it.each(['succeeded', 'failed', 'denied', 'cancelled', 'timed_out'])('%s is terminal', (status) => {
    expect(isTerminal(status)).toBe(true);
    expect(pollWhileOpen(status, 5000)).toBe(false);
  });

  it.each(['pending', 'running', 'waiting', undefined])('%s is open and keeps polling', (status) => {
    expect(isTerminal(status)).toBe(false);
    expect(pollWhileOpen(status, 5000)).toBe(5000);
    expect(pollWhileOpen(status, false)).toBe(false);
  });

  it('reads an open run again while the stream is up, and a finished one never', () => {
    // An approval step's job waiting for a human sends no run event: only a read shows it.
    expect(runPollInterval('running', false)).toBe(OPEN_RUN_LIVE_POLL_MS);
    expect(runPollInterval(undefined, false)).toBe(OPEN_RUN_LIVE_POLL_MS);
    expect(runPollInterval('running', 2000)).toBe(2000);
    expect(runPollInterval('succeeded', false)).toBe(false);
    expect(runPollInterval('failed', 2000)).toBe(false);
  });

  it('gives every status words and a tone', () => {
    expect(statusWords('timed_out')).toBe('timed out');
    expect(statusWords(undefined)).toBe('pending');
    expect(statusTone('succeeded')).toBe('ok');
    expect(statusTone('failed')).toBe('bad');
    expect(statusTone('waiting')).toBe('attention');
    expect(statusTone('skipped')).toBe('muted');
    expect(statusTone('something_new')).toBe('idle');
  });

  it('knows a step at an approval gate', () => {
    expect(awaitsApproval({ status: 'waiting' })).toBe(true);
    expect(awaitsApproval({ status: 'running', gate: 'waiting' })).toBe(true);
    expect(awaitsApproval({ status: 'running', gate: 'passed' })).toBe(false);
    expect(awaitsApproval(undefined)).toBe(false);
  });

  it('orders children by their index', () => {
    const children = { 'f[10]': {}, 'f[2]': {}, 'f[0]': {} };
    expect(orderedChildren({ children }).map(([id]) => id)).toEqual(['f[0]', 'f[2]', 'f[10]']);
  });
});

describe('approvalsAwaited', () => {
  it('lists steps and items waiting at a gate, with the gate job', () => {
    expect(
      approvalsAwaited({
        steps: {
          approve: { status: 'waiting', job_id: 'r:approve@1' },
          refund: { status: 'running', gate: 'waiting', job_id: 'r:refund@1' },
          fan: { status: 'running', children: { 'fan[1]': { status: 'waiting', job_id: 'r:fan[1]@1' }, 'fan[0]': { status: 'succeeded' } } },
          done: { status: 'succeeded' },
        },
      }),
    ).toEqual([
      { path: 'approve', jobId: 'r:approve@1' },
      { path: 'refund', jobId: 'r:refund@1' },
      { path: 'fan[1]', jobId: 'r:fan[1]@1' },
    ]);
  });
});
