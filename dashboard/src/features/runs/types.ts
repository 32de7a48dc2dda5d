/**
 * Runs as the gateway serves them (shared/cordum/gateway/workflows/views.py). The
 * generated schema leaves the engine's extra step fields (`children`, `gate`,
 * `skip_reason`, ...) as open properties; these types name the ones the pages read.
 */

export const RUN_STATUSES = [
  'pending',
  'running',
  'waiting',
  'succeeded',
  'failed',
  'denied',
  'cancelled',
  'timed_out',
] as const;

export type RunStatus = (typeof RUN_STATUSES)[number];

/** A run status, or `skipped` (a step only). Kept open: a newer engine may add one. */
export type StepStatus = RunStatus | 'skipped' | (string & {});

export type StepError = {
  code?: string;
  reason?: string;
  message?: string;
  [key: string]: unknown;
};

export type StepRun = {
  step_id?: string;
  status?: StepStatus;
  started_at?: string | null;
  completed_at?: string | null;
  next_attempt_at?: string | null;
  attempts?: number;
  job_id?: string | null;
  error?: StepError | null;
  output?: unknown;
  input?: unknown;
  item?: unknown;
  /** for_each items and loop iterations, keyed `<step>[i]`. */
  children?: Record<string, StepRun> | null;
  resolved_items?: unknown[] | null;
  skip_reason?: string;
  /** A `policy_gate: require_approval` step's gate: "", `waiting` or `passed`. */
  gate?: string;
};

export type RunTimer = {
  workflow_id?: string;
  run_id?: string;
  fires_at?: string;
  remaining_ms?: number;
};

export type RunSummary = {
  id?: string;
  workflow_id?: string;
  status?: RunStatus;
  started_at?: string;
  completed_at?: string | null;
  error?: Record<string, unknown> | null;
  triggered_by?: string;
  created_at?: string;
  updated_at?: string;
  rerun_of?: string;
  rerun_step?: string;
  dry_run?: boolean;
  labels?: Record<string, string>;
};

export type RunDetail = RunSummary & {
  input?: Record<string, unknown>;
  output?: unknown;
  steps?: Record<string, StepRun>;
  context?: Record<string, unknown>;
  created_by?: string;
  timers?: RunTimer[];
};

export type RunPage = {
  items?: RunSummary[];
  next_cursor?: string | null;
};

export type TimelineEvent = {
  timestamp?: string;
  time?: string;
  type?: string;
  run_id?: string;
  workflow_id?: string;
  step_id?: string | null;
  job_id?: string;
  status?: string;
  message?: string;
  data?: Record<string, unknown> | null;
};

/** A definition's step, as far as the run graph reads it. */
export type DefinitionStep = {
  id?: string;
  name?: string;
  type?: string;
  depends_on?: string[];
  on_error?: string;
  for_each?: string;
  input?: Record<string, unknown> | null;
  [key: string]: unknown;
};

export type Definition = {
  id?: string;
  name?: string;
  steps?: Record<string, DefinitionStep>;
  [key: string]: unknown;
};
