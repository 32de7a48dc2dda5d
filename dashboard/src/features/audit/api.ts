import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from '@/lib/api';

import { auditQuery, type AuditFilters } from './filters';

export type AuditEvent = Schemas['AuditEvent'];
export type AuditVerifyResult = Schemas['AuditVerifyResult'];
export type AuditHold = Schemas['AuditHold'];

/** How often the first page is read again while the live tail is on, in ms. */
export const TAIL_POLL_MS = 5000;

export function useAuditEvents(filters: AuditFilters, cursor: string | undefined, options: { enabled: boolean; tail: boolean }) {
  const api = useApi();
  const query = auditQuery(filters, cursor);
  return useQuery({
    queryKey: ['audit', 'events', query],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/audit/events', { params: { query } }));
      return { items: page.items ?? [], nextCursor: page.next_cursor ?? '' };
    },
    enabled: options.enabled,
    placeholderData: keepPreviousData,
    // The tail: most audited acts (policy changes, holds, config writes, reads) are not on
    // the event stream, so the first page is also read again every 5 s while the tail is
    // on; job and run events refetch it sooner (see AuditPage). Each read is itself
    // audited, so nothing polls with the tail off.
    refetchInterval: options.tail && !cursor ? TAIL_POLL_MS : false,
  });
}

/** The chain's check; read once per visit (each check appends `audit.verify`). */
export function useAuditVerify(enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['audit', 'verify'],
    queryFn: () => unwrap(api.GET('/api/v1/audit/verify')),
    enabled,
    staleTime: Infinity,
  });
}

export function useAuditHold(enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['audit', 'hold'],
    queryFn: () => unwrap(api.GET('/api/v1/audit/hold')),
    enabled,
  });
}

export function useChangeHold() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (change: { set: true; reason: string } | { set: false }) =>
      change.set
        ? unwrap(api.PUT('/api/v1/audit/hold', { body: change.reason ? { reason: change.reason } : {} }))
        : unwrap(api.DELETE('/api/v1/audit/hold')),
    onSettled: async () => {
      await Promise.all([
        queryClient.invalidateQueries({ queryKey: ['audit', 'hold'] }),
        queryClient.invalidateQueries({ queryKey: ['audit', 'events'] }),
      ]);
    },
  });
}
