/**
 * Which cached answers a live event makes stale, and a throttle so a burst of events
 * refetches each of them at most once per window.
 */

import type { LiveEvent } from './liveConnection';

export type QueryKey = readonly unknown[];

const JOB_PAYLOADS = ['jobRequest', 'jobResult', 'jobProgress', 'jobCancel'] as const;

/** The job a bus packet frame is about, '' when it names none. */
export function jobIdOf(data: unknown): string {
  if (typeof data !== 'object' || data === null) return '';
  const frame = data as Record<string, unknown>;
  for (const name of JOB_PAYLOADS) {
    const payload = frame[name];
    if (typeof payload === 'object' && payload !== null) {
      const id = (payload as Record<string, unknown>).jobId;
      if (typeof id === 'string' && id) return id;
    }
  }
  return '';
}

/** The query keys to invalidate for `event` (each a prefix, as TanStack Query matches them). */
export function keysForEvent(event: LiveEvent): QueryKey[] {
  const { type, data } = event;
  if (type.startsWith('job.') || type === 'audit.output_policy') {
    const keys: QueryKey[] = [['jobs'], ['approvals'], ['overview']];
    const jobId = jobIdOf(data);
    if (jobId) keys.push(['job', jobId]);
    if (type === 'job.dlq') keys.push(['dlq']);
    return keys;
  }
  if (type === 'workflow.run') {
    const keys: QueryKey[] = [['runs']];
    const runId = typeof data?.runId === 'string' ? data.runId : '';
    if (runId) keys.push(['run', runId]);
    return keys;
  }
  if (type === 'worker.heartbeat') return [['workers']];
  return [];
}

/**
 * Calls `invalidate(key)` at once for a key not seen within `windowMs`, else once at
 * the end of the window (so the last change is never lost).
 */
export class InvalidationThrottle {
  private readonly last = new Map<string, number>();
  private readonly pending = new Map<string, ReturnType<typeof setTimeout>>();

  constructor(
    private readonly invalidate: (key: QueryKey) => void,
    private readonly windowMs = 500,
    private readonly now: () => number = () => Date.now(),
  ) {}

  request(key: QueryKey): void {
    const id = JSON.stringify(key);
    if (this.pending.has(id)) return;
    const since = this.now() - (this.last.get(id) ?? -Infinity);
    if (since >= this.windowMs) {
      this.fire(id, key);
      return;
    }
    this.pending.set(
      id,
      setTimeout(() => {
        this.pending.delete(id);
        this.fire(id, key);
      }, this.windowMs - since),
    );
  }

  private fire(id: string, key: QueryKey): void {
    this.last.set(id, this.now());
    this.invalidate(key);
  }

  dispose(): void {
    for (const timer of this.pending.values()) clearTimeout(timer);
    this.pending.clear();
  }
}
