import type { RunDetail, StepRun, StepStatus } from './types';

/** Statuses a run never leaves (cordum.workflow.model.TERMINAL_RUN). */
export const TERMINAL_RUN_STATUSES: ReadonlySet<string> = new Set([
  'succeeded',
  'failed',
  'denied',
  'cancelled',
  'timed_out',
]);

export function isTerminal(status: string | undefined): boolean {
  return status !== undefined && TERMINAL_RUN_STATUSES.has(status.toLowerCase());
}

/** A run's refetch interval: `poll` while it may still change, none once it is terminal. */
export function pollWhileOpen(status: string | undefined, poll: number | false): number | false {
  return isTerminal(status) ? false : poll;
}

/**
 * How often an open run is read again while the live stream is up. Its events refresh
 * it at once, but not every change of a run sends one: a step's job that moves on by
 * itself (an approval step's job reaching APPROVAL_REQUIRED, which the run shows as
 * waiting) is read from the job when the run is read. One request per open run page.
 */
export const OPEN_RUN_LIVE_POLL_MS = 5000;

/** A run's refetch interval with the stream up (`poll` false) or down (`poll` ms). */
export function runPollInterval(status: string | undefined, poll: number | false): number | false {
  return pollWhileOpen(status, poll === false ? OPEN_RUN_LIVE_POLL_MS : poll);
}

/** How a status is coloured; the status word is always shown beside the colour. */
export type StatusTone = 'ok' | 'bad' | 'active' | 'attention' | 'idle' | 'muted';

const TONES: Record<string, StatusTone> = {
  succeeded: 'ok',
  failed: 'bad',
  denied: 'bad',
  timed_out: 'bad',
  running: 'active',
  waiting: 'attention',
  pending: 'idle',
  cancelled: 'muted',
  skipped: 'muted',
};

export function statusTone(status: StepStatus | undefined): StatusTone {
  return TONES[(status ?? '').toLowerCase()] ?? 'idle';
}

/** The status as words: `timed_out` reads "timed out". */
export function statusWords(status: StepStatus | undefined): string {
  return (status ?? 'pending').toLowerCase().replace(/_/g, ' ');
}

/**
 * A step (or item) stands at an approval gate: an approval step's gate job, or the gate a
 * `policy_gate: require_approval` puts in front of a job, both leave it `waiting`; no
 * other step kind waits.
 */
export function awaitsApproval(step: StepRun | undefined): boolean {
  if (!step) return false;
  return (step.status ?? '').toLowerCase() === 'waiting' || step.gate === 'waiting';
}

/** A `<step>[i]` child id's index, for ordering items numerically. */
export function childIndex(childId: string): number {
  const match = /\[(\d+)\]$/.exec(childId);
  return match ? Number(match[1]) : Number.MAX_SAFE_INTEGER;
}

export function orderedChildren(step: StepRun | undefined): Array<[string, StepRun]> {
  return Object.entries(step?.children ?? {}).sort(
    ([a], [b]) => childIndex(a) - childIndex(b) || a.localeCompare(b),
  );
}

/** Every step and item standing at an approval gate, with the gate job's id. */
export function approvalsAwaited(run: RunDetail): Array<{ path: string; jobId: string }> {
  const out: Array<{ path: string; jobId: string }> = [];
  for (const [stepId, step] of Object.entries(run.steps ?? {})) {
    if (awaitsApproval(step)) out.push({ path: stepId, jobId: step.job_id ?? '' });
    for (const [childId, child] of orderedChildren(step)) {
      if (awaitsApproval(child)) out.push({ path: childId, jobId: child.job_id ?? '' });
    }
  }
  return out;
}
