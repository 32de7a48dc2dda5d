import type { JobDetail } from './types';

/** What the detail page may say about a job's output, decided from the job alone. */
export type OutputView =
  | { kind: 'quarantined'; reason: string }
  | { kind: 'redacted'; reason: string }
  | { kind: 'too_large'; bytes: number | undefined; pointer: string }
  | { kind: 'not_succeeded'; state: string }
  | { kind: 'unavailable' }
  | { kind: 'shown'; value: unknown };

const WITHHELD = new Set(['QUARANTINE', 'DENY']);

/**
 * A quarantined or redacted output is never shown: the page says so in words.
 * (A quarantined job's output is withheld by the gateway anyway; a redacted one is
 * served as the redacted copy, and the page still does not print it.)
 */
export function outputView(job: JobDetail): OutputView {
  const safety = job.output_safety ?? {};
  const decision = String(job.output_decision ?? safety.decision ?? '').toUpperCase();
  const reason = safety.reason ?? '';
  if (job.state === 'OUTPUT_QUARANTINED' || safety.quarantined === true || WITHHELD.has(decision)) {
    return { kind: 'quarantined', reason };
  }
  if (decision === 'REDACT') return { kind: 'redacted', reason };
  if (job.state !== 'SUCCEEDED') return { kind: 'not_succeeded', state: job.state ?? '' };
  if (job.result_too_large) {
    return { kind: 'too_large', bytes: job.result_size_bytes, pointer: job.result_ptr ?? '' };
  }
  if (job.result === null || job.result === undefined) return { kind: 'unavailable' };
  return { kind: 'shown', value: job.result };
}
