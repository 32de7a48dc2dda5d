/**
 * Server state of the runs pages. The live provider invalidates `['runs']` and
 * `['run', runId]` on `workflow.run` events, by prefix: the run lists live under the
 * first, a run and its timeline under the second. A run's definition is cached under
 * `['workflow', id]`, the key the workflows pages use for the same answer.
 */

import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { unwrap, useApi } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

import { runPollInterval } from './status';
import type { Definition, RunDetail, RunPage, TimelineEvent } from './types';

export const RUNS_PAGE_SIZE = 25;

export type RunFilters = { status?: string; workflowId?: string; cursor?: string };

export const runKeys = {
  all: ['runs'] as const,
  list: (filters: RunFilters) => ['runs', filters] as const,
  detail: (runId: string) => ['run', runId] as const,
  timeline: (runId: string) => ['run', runId, 'timeline'] as const,
  definition: (workflowId: string) => ['workflow', workflowId] as const,
};

export function useRunList(filters: RunFilters) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: runKeys.list(filters),
    queryFn: async () => {
      const data = await unwrap(
        api.GET('/api/v1/workflow-runs', {
          params: {
            query: {
              limit: RUNS_PAGE_SIZE,
              status: filters.status || undefined,
              workflow_id: filters.workflowId || undefined,
              cursor: filters.cursor || undefined,
            },
          },
        }),
      );
      return data as unknown as RunPage;
    },
    placeholderData: keepPreviousData,
    refetchInterval: poll,
  });
}

/** A run; polled until it is terminal (a live event refreshes it at once; see
 * {@link runPollInterval} for why it is still polled while the stream is up). */
export function useRun(runId: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: runKeys.detail(runId),
    queryFn: async () => {
      const data = await unwrap(
        api.GET('/api/v1/workflow-runs/{id}', { params: { path: { id: runId } } }),
      );
      return data as unknown as RunDetail;
    },
    refetchInterval: (query) => runPollInterval(query.state.data?.status, poll),
  });
}

/**
 * A run's events, oldest first. It does not poll by itself: the run page refetches it
 * whenever the run it belongs to changes.
 */
export function useRunTimeline(runId: string) {
  const api = useApi();
  return useQuery({
    queryKey: runKeys.timeline(runId),
    queryFn: async () => {
      const data = await unwrap(
        api.GET('/api/v1/workflow-runs/{id}/timeline', { params: { path: { id: runId } } }),
      );
      return (Array.isArray(data) ? data : []) as unknown as TimelineEvent[];
    },
  });
}

/** The definition a run was made from (it may have been deleted since: the page copes). */
export function useRunDefinition(workflowId: string | undefined) {
  const api = useApi();
  return useQuery({
    queryKey: runKeys.definition(workflowId ?? ''),
    queryFn: async () => {
      const data = await unwrap(
        api.GET('/api/v1/workflows/{id}', { params: { path: { id: workflowId ?? '' } } }),
      );
      return data as unknown as Definition;
    },
    enabled: Boolean(workflowId),
    staleTime: 60_000,
  });
}

export function useCancelRun(run: { id: string; workflowId: string }) {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async () => {
      await unwrap(
        api.POST('/api/v1/workflows/{id}/runs/{run_id}/cancel', {
          params: { path: { id: run.workflowId, run_id: run.id } },
        }),
      );
    },
    onSettled: async () => {
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: runKeys.detail(run.id) }),
        queryClient.invalidateQueries({ queryKey: runKeys.all }),
      ]);
    },
  });
}

export type RerunRequest = { fromStep: string; dryRun: boolean };

export function useRerunRun(runId: string) {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: async ({ fromStep, dryRun }: RerunRequest) => {
      const body: { from_step?: string; dry_run?: boolean } = {};
      if (fromStep) body.from_step = fromStep;
      if (dryRun) body.dry_run = true;
      const data = await unwrap(
        api.POST('/api/v1/workflow-runs/{id}/rerun', { params: { path: { id: runId } }, body }),
      );
      return (data as { run_id?: string }).run_id ?? '';
    },
    onSuccess: async () => {
      await queryClient.invalidateQueries({ queryKey: runKeys.all });
    },
  });
}
