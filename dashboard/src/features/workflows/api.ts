/**
 * Server state of the workflow pages. Keys: `['workflows']`, `['workflow', id]`, and a
 * definition's recent runs under `['runs', ...]` so that the live provider's
 * invalidation of `['runs']` on `workflow.run` events refreshes them.
 */

import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { unwrap, useApi } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

import type { WorkflowDefinition, WorkflowRunSummary } from './types';

export const RECENT_RUNS = 10;

export const workflowKeys = {
  all: ['workflows'] as const,
  detail: (id: string) => ['workflow', id] as const,
  runs: (id: string) => ['runs', { workflowId: id, recent: RECENT_RUNS }] as const,
};

export function useWorkflows() {
  const api = useApi();
  return useQuery({
    queryKey: workflowKeys.all,
    queryFn: async () => {
      const data = await unwrap(api.GET('/api/v1/workflows', { params: { query: { limit: 200 } } }));
      return (Array.isArray(data) ? data : []) as unknown as WorkflowDefinition[];
    },
  });
}

export function useWorkflow(id: string) {
  const api = useApi();
  return useQuery({
    queryKey: workflowKeys.detail(id),
    queryFn: async () => {
      const data = await unwrap(api.GET('/api/v1/workflows/{id}', { params: { path: { id } } }));
      return data as unknown as WorkflowDefinition;
    },
  });
}

export function useRecentRuns(id: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: workflowKeys.runs(id),
    queryFn: async () => {
      const data = await unwrap(
        api.GET('/api/v1/workflows/{id}/runs', {
          params: { path: { id }, query: { limit: RECENT_RUNS } },
        }),
      );
      return (Array.isArray(data) ? data : []) as unknown as WorkflowRunSummary[];
    },
    refetchInterval: poll,
  });
}

export type StartRunRequest = {
  input: Record<string, unknown>;
  dryRun: boolean;
  /** Sent as `Idempotency-Key`: the same attempt sent twice starts one run. */
  idempotencyKey: string;
};

export function useStartRun(id: string) {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async ({ input, dryRun, idempotencyKey }: StartRunRequest) => {
      const data = await unwrap(
        api.POST('/api/v1/workflows/{id}/runs', {
          params: {
            path: { id },
            query: dryRun ? { dry_run: 'true' } : undefined,
            header: { 'Idempotency-Key': idempotencyKey },
          },
          body: input,
        }),
      );
      return (data as { run_id?: string }).run_id ?? '';
    },
    onSuccess: async () => {
      await queryClient.invalidateQueries({ queryKey: ['runs'] });
    },
  });
}
