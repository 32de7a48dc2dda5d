import { useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { ApiError, unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

export type BundleItem = Schemas['PolicyBundleItem'];
export type Bundle = Schemas['PolicyBundle'];
export type SnapshotSummary = Schemas['PolicySnapshotSummary'];
export type Proposal = Schemas['PolicyProposal'];
export type AuditEntry = Schemas['PolicyAuditEntry'];
export type Decision = Schemas['PolicyDecision'];
export type CheckRequest = Schemas['PolicyCheck'];
export type PublishResult = Schemas['PolicyPublishResult'];
export type RollbackResult = Schemas['PolicyRollbackResult'];

export const AUDIT_LIMIT = 20;

/** A change of the bundles in force: made at once, or kept for a second person to confirm. */
export type Outcome<T> = { pending: false; result: T } | { pending: true; proposal: Proposal };

/** A bundle id as a path writes it: `~` for `/`, as the gateway reads it. */
export function pathId(id: string): string {
  return id.replaceAll('/', '~');
}

/** A bundle id from a path segment. */
export function bundleIdOf(segment: string): string {
  return segment.replaceAll('~', '/');
}

export function bundlePath(id: string): string {
  return `/policy/bundles/${encodeURIComponent(pathId(id))}`;
}

async function outcome<T>(call: Promise<{ data?: unknown; error?: unknown; response: Response }>): Promise<Outcome<T>> {
  const { data, error, response } = await call;
  if (!response.ok) throw new ApiError(response.status, error);
  const body = (data ?? {}) as { status?: string; proposal?: Proposal };
  if (response.status === 202 || body.status === 'pending_confirmation') {
    return { pending: true, proposal: body.proposal ?? {} };
  }
  return { pending: false, result: data as T };
}

export function useBundles(enabled: boolean) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['policy', 'bundles'],
    queryFn: async () => {
      const list = await unwrap(api.GET('/api/v1/policy/bundles'));
      return list.items ?? [];
    },
    enabled,
    refetchInterval: poll,
  });
}

/** One bundle; `null` when there is none of that id (a new draft). */
export function useBundle(id: string, enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['policy', 'bundle', id],
    queryFn: async (): Promise<Bundle | null> => {
      try {
        return await unwrap(api.GET('/api/v1/policy/bundles/{id}', { params: { path: { id: pathId(id) } } }));
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) return null;
        throw error;
      }
    },
    enabled,
  });
}

export function useSnapshots(enabled: boolean) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['policy', 'snapshots'],
    queryFn: async () => (await unwrap(api.GET('/api/v1/policy/bundles/snapshots'))).items ?? [],
    enabled,
    refetchInterval: poll,
  });
}

export function useProposals(enabled: boolean) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['policy', 'proposals'],
    queryFn: async () => (await unwrap(api.GET('/api/v1/policy/proposals'))).items ?? [],
    enabled,
    refetchInterval: poll,
  });
}

export function usePolicyAudit(enabled: boolean) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['policy', 'audit'],
    queryFn: async () =>
      (await unwrap(api.GET('/api/v1/policy/audit', { params: { query: { limit: String(AUDIT_LIMIT) } } }))) ?? [],
    enabled,
    refetchInterval: poll,
  });
}

function useInvalidatePolicy() {
  const queryClient = useQueryClient();
  return () => queryClient.invalidateQueries({ queryKey: ['policy'] });
}

export type SaveInput = { id: string; content: string; message?: string; isNew: boolean };

/** PUT a bundle; a new one is a draft (`enabled: false`), an edit keeps its state. */
export function useSaveBundle() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: ({ id, content, message, isNew }: SaveInput) =>
      outcome<Schemas['PolicyBundleWritten']>(
        api.PUT('/api/v1/policy/bundles/{id}', {
          params: { path: { id: pathId(id) } },
          body: { content, ...(message ? { message } : {}), ...(isNew ? { enabled: false } : {}) },
        }),
      ),
    onSettled: invalidate,
  });
}

export function useDeleteBundle() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: (id: string) =>
      outcome<null>(api.DELETE('/api/v1/policy/bundles/{id}', { params: { path: { id: pathId(id) } } })),
    onSettled: invalidate,
  });
}

export function useSimulate(id: string) {
  const api = useApi();
  return useMutation({
    mutationFn: ({ request, content }: { request: CheckRequest; content: string }) =>
      unwrap(
        api.POST('/api/v1/policy/bundles/{id}/simulate', {
          params: { path: { id: pathId(id) } },
          body: { request, content },
        }),
      ),
  });
}

export function usePublish() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: ({ bundleIds, message }: { bundleIds: string[]; message?: string }) =>
      outcome<PublishResult>(
        api.POST('/api/v1/policy/publish', {
          body: { bundle_ids: bundleIds, ...(message ? { message } : {}) },
        }),
      ),
    onSettled: invalidate,
  });
}

export function useRollback() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: (snapshotId: string) =>
      outcome<RollbackResult>(api.POST('/api/v1/policy/rollback', { body: { snapshot_id: snapshotId } })),
    onSettled: invalidate,
  });
}

export function useConfirmProposal() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: (proposalId: string) =>
      unwrap(
        api.POST('/api/v1/policy/proposals/{proposal_id}/confirm', {
          params: { path: { proposal_id: proposalId } },
        }),
      ),
    onSettled: invalidate,
  });
}

export function useRejectProposal() {
  const api = useApi();
  const invalidate = useInvalidatePolicy();
  return useMutation({
    mutationFn: ({ proposalId, reason }: { proposalId: string; reason?: string }) =>
      unwrap(
        api.POST('/api/v1/policy/proposals/{proposal_id}/reject', {
          params: { path: { proposal_id: proposalId } },
          body: reason ? { reason } : {},
        }),
      ),
    onSettled: invalidate,
  });
}

/** Why the signed-in principal may not confirm `proposal` (its author), else ''. */
export function ownProposalReason(proposal: Proposal, principalId: string | undefined): string {
  if (principalId && proposal.proposed_by && proposal.proposed_by === principalId) {
    return 'You proposed this change: another identity must confirm it (you may still reject it to withdraw it).';
  }
  return '';
}

/** What a proposal would do, in words. */
export function describeProposal(proposal: Proposal): string {
  const bundles = (proposal.bundle_ids ?? []).join(', ');
  switch (proposal.action) {
    case 'publish':
      return bundles ? `Publish ${bundles}` : 'Publish every bundle';
    case 'rollback':
      return `Roll back to snapshot ${proposal.snapshot_id ?? ''}`.trim();
    case 'delete':
      return `Delete ${bundles}`;
    case 'edit':
      return `Edit ${bundles}${proposal.enabled === false ? ' (take it out of force)' : ''}`;
    default:
      return `${proposal.action ?? 'Change'} ${bundles}`.trim();
  }
}
