import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

export type DlqEntry = Schemas['DLQEntry'] & { reason_code?: string; reason?: string };

export const PAGE_SIZE = 50;

export function useDlq(cursor?: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['dlq', { cursor: cursor ?? '' }],
    queryFn: async () => {
      const query = cursor ? { limit: PAGE_SIZE, cursor } : { limit: PAGE_SIZE };
      const page = await unwrap(api.GET('/api/v1/dlq/page', { params: { query } }));
      return { items: (page.items ?? []) as DlqEntry[], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
    refetchInterval: poll,
  });
}

export function useRetryEntry() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (jobId: string) =>
      unwrap(api.POST('/api/v1/dlq/{job_id}/retry', { params: { path: { job_id: jobId } } })),
    onSettled: async () => {
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: ['dlq'] }),
        queryClient.invalidateQueries({ queryKey: ['jobs'] }),
      ]);
    },
  });
}

export function useDeleteEntry() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (jobId: string) =>
      unwrap(api.DELETE('/api/v1/dlq/{job_id}', { params: { path: { job_id: jobId } } })),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['dlq'] }),
  });
}

/** Why the entry is in the DLQ, in the words the gateway stored. */
export function entryReason(entry: DlqEntry): string {
  return entry.error || entry.reason || entry.reason_code || 'No reason recorded.';
}
