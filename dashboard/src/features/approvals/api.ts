import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { ApiError, unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

export type ApprovalItem = Schemas['ApprovalItem'];
export type Decision = 'approve' | 'reject';
export type ApprovalContext = Schemas['ApprovalContext'];

export const PAGE_SIZE = 50;

export function useApprovals(cursor?: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['approvals', { cursor: cursor ?? '' }],
    queryFn: async () => {
      const query = cursor ? { limit: PAGE_SIZE, cursor } : { limit: PAGE_SIZE };
      const page = await unwrap(api.GET('/api/v1/approvals', { params: { query } }));
      return { items: page.items ?? [], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
    refetchInterval: poll,
  });
}

/** The gate's context document; read only when asked for. */
export function useApprovalContext(jobId: string, enabled: boolean) {
  const api = useApi();
  return useQuery({
    // Not under ['approvals']: job events do not change a gate's context.
    queryKey: ['approval-context', jobId],
    queryFn: () =>
      unwrap(api.GET('/api/v1/approvals/{job_id}/context', { params: { path: { job_id: jobId } } })),
    enabled,
    staleTime: 60_000,
  });
}

/** How many list pages of {@link ITEM_PAGE_SIZE} the item of one job is looked for in. */
export const ITEM_PAGES = 5;
export const ITEM_PAGE_SIZE = 200;

/**
 * The waiting item of `jobId` as the list has it (with `may_decide` for the signed-in
 * key), or null when the job no longer waits (or is past the first pages looked at).
 * Under ['approvals'], so job events refresh it.
 */
export function useApprovalItem(jobId: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['approvals', 'item', jobId],
    queryFn: async (): Promise<ApprovalItem | null> => {
      let cursor = '';
      for (let n = 0; n < ITEM_PAGES; n++) {
        const query = cursor ? { limit: ITEM_PAGE_SIZE, cursor } : { limit: ITEM_PAGE_SIZE };
        const page = await unwrap(api.GET('/api/v1/approvals', { params: { query } }));
        const found = (page.items ?? []).find((item) => item.job?.id === jobId);
        if (found) return found;
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
      return null;
    },
    refetchInterval: poll,
  });
}

export function useDecide(jobId: string) {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: ({ decision, reason }: { decision: Decision; reason: string }) => {
      const options = { params: { path: { job_id: jobId } }, body: { reason } };
      return unwrap(
        decision === 'approve'
          ? api.POST('/api/v1/approvals/{job_id}/approve', options)
          : api.POST('/api/v1/approvals/{job_id}/reject', options),
      );
    },
    onSettled: async () => {
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: ['approvals'] }),
        queryClient.invalidateQueries({ queryKey: ['job', jobId] }),
        queryClient.invalidateQueries({ queryKey: ['jobs'] }),
        queryClient.invalidateQueries({ queryKey: ['approval-context', jobId] }),
      ]);
    },
  });
}

/** Whether the signed-in key may decide `item`, and why not. A missing field means it may. */
export function decidable(item: ApprovalItem): { may: boolean; why: string } {
  if (item.may_decide === false) {
    return {
      may: false,
      why: item.may_not_decide_reason || 'The signed-in key may not decide this approval.',
    };
  }
  return { may: true, why: '' };
}

export const SELF_APPROVAL_TEXT =
  'You cannot decide this approval: the signed-in key submitted this job (or started its workflow run). Another identity must approve or reject it.';

/** What a failed decision says to the user. */
export function decisionError(error: unknown): string {
  if (error instanceof ApiError) {
    if (error.status === 403 && error.code === 'self_approval_denied') return SELF_APPROVAL_TEXT;
    if (error.status === 403) return `Not allowed: ${error.message}`;
    if (error.status === 409) {
      return `${error.message}${error.code ? ` (${error.code})` : ''}. The list has been refreshed.`;
    }
    return `${error.message}${error.code ? ` (${error.code})` : ''}`;
  }
  return error instanceof Error ? error.message : 'The decision could not be sent.';
}
