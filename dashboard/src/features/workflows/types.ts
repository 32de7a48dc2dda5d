/** Definitions as the gateway serves them (shared/cordum/gateway/workflows/views.py). */

export type WorkflowStep = {
  id: string;
  type: string;
  name?: string;
  depends_on?: string[];
  condition?: string;
  topic?: string;
  for_each?: string;
  max_parallel?: number;
  policy_gate?: string;
  on_error?: string;
  timeout_sec?: number;
  delay_sec?: number;
  input?: Record<string, unknown> | null;
  [key: string]: unknown;
};

export type WorkflowDefinition = {
  id: string;
  name: string;
  steps: Record<string, WorkflowStep>;
  description?: string;
  version?: string;
  timeout_sec?: number;
  input_schema?: Record<string, unknown>;
  created_by?: string;
  created_at?: string;
  updated_at?: string;
  [key: string]: unknown;
};

export type WorkflowRunSummary = {
  id?: string;
  workflow_id?: string;
  status?: string;
  started_at?: string;
  completed_at?: string | null;
  triggered_by?: string;
};
