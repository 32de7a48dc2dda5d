import type { Schemas } from '@/lib/api';

/** The output policy's record of a job's output (Cordum's `output_safety`). */
export type OutputSafety = {
  decision?: string;
  phase?: string;
  quarantined?: boolean;
  reason?: string;
  rule_id?: string;
  skipped?: boolean;
};

/** A job's detail with the fields beyond Cordum's schema that this page reads. */
export type JobDetail = Schemas['JobDetail'] & {
  output_decision?: string;
  output_safety?: OutputSafety;
  result_too_large?: boolean;
  result_size_bytes?: number;
  attempts?: number;
  worker_id?: string;
  run_id?: string;
  workflow_id?: string;
  step_id?: string;
  approval_status?: string;
  approval_by?: string;
  approval_reason?: string;
  approval_at?: string;
  error_message?: string;
  error_code?: string;
};

export type JobSummary = Schemas['JobSummary'];
export type SafetyDecision = Schemas['SafetyDecision'];

/** Every state a job can be in (cordum.store.jobs.JobState). */
export const JOB_STATES = [
  'PENDING',
  'APPROVAL_REQUIRED',
  'SCHEDULED',
  'DISPATCHED',
  'RUNNING',
  'RETRYING',
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'TIMEOUT',
  'DENIED',
  'OUTPUT_QUARANTINED',
] as const;

export const TERMINAL_STATES: ReadonlySet<string> = new Set([
  'SUCCEEDED',
  'FAILED',
  'CANCELLED',
  'TIMEOUT',
  'DENIED',
  'OUTPUT_QUARANTINED',
]);

export function isTerminal(state: string | undefined): boolean {
  return TERMINAL_STATES.has(state ?? '');
}

export type JobFilters = { state: string; topic: string };
