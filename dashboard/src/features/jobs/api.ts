import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { unwrap, useApi } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

import { isTerminal, type JobDetail, type JobFilters, type SafetyDecision } from './types';

export const PAGE_SIZE = 50;

/** The query of GET /api/v1/jobs for `filters` at `cursor` (empty filters left out). */
export function jobListQuery(filters: JobFilters, cursor?: string) {
  const query: { limit: number; state?: string; topic?: string; cursor?: string } = { limit: PAGE_SIZE };
  if (filters.state) query.state = filters.state;
  if (filters.topic.trim()) query.topic = filters.topic.trim();
  if (cursor) query.cursor = cursor;
  return query;
}

export function useJobs(filters: JobFilters, cursor?: string) {
  const api = useApi();
  const poll = usePollInterval();
  const query = jobListQuery(filters, cursor);
  return useQuery({
    queryKey: ['jobs', query],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/jobs', { params: { query } }));
      return { items: page.items ?? [], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
    refetchInterval: poll,
  });
}

export function useJob(id: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['job', id],
    queryFn: async () =>
      (await unwrap(api.GET('/api/v1/jobs/{id}', { params: { path: { id } } }))) as JobDetail,
    // A finished job no longer changes: only an open one is polled.
    refetchInterval: (query) => (isTerminal(query.state.data?.state) ? false : poll),
  });
}

export function useJobDecisions(id: string) {
  const api = useApi();
  return useQuery({
    queryKey: ['job', id, 'decisions'],
    queryFn: async (): Promise<SafetyDecision[]> =>
      (await unwrap(api.GET('/api/v1/jobs/{id}/decisions', { params: { path: { id } } }))) ?? [],
  });
}

export function useCancelJob(id: string) {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: () => unwrap(api.POST('/api/v1/jobs/{id}/cancel', { params: { path: { id } } })),
    onSettled: async () => {
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: ['job', id] }),
        queryClient.invalidateQueries({ queryKey: ['jobs'] }),
      ]);
    },
  });
}
