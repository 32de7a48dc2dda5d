import { keepPreviousData, useMutation, useQuery, useQueryClient } from '@tanstack/react-query';

import { ApiError, describeError, unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

// ---------------------------------------------------------------- traces

/** A job of a trace: the job detail, with the times the timeline reads. */
export type TraceJob = Schemas['JobDetail'] & {
  updated_at?: string | null;
  worker_id?: string;
};

export type Trace = {
  jobs: TraceJob[];
  /** X-Has-More: the trace holds more jobs than the answer carries. */
  hasMore: boolean;
  /** X-Total-Count: how many of the tenant's jobs the trace holds (null when not sent). */
  total: number | null;
};

/** The answer's paging headers: whether jobs were left out, and how many there are. */
export function traceHeaders(headers: Headers): { hasMore: boolean; total: number | null } {
  const more = (headers.get('X-Has-More') ?? '').trim().toLowerCase() === 'true';
  const raw = headers.get('X-Total-Count');
  const total = raw !== null && raw.trim() !== '' && Number.isFinite(Number(raw)) ? Number(raw) : null;
  return { hasMore: more, total };
}

export function useTrace(id: string) {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    // Under ['jobs']: job events refresh an open trace.
    queryKey: ['jobs', 'trace', id],
    queryFn: async (): Promise<Trace> => {
      const { data, error, response } = await api.GET('/api/v1/traces/{id}', { params: { path: { id } } });
      if (!response.ok) throw new ApiError(response.status, error);
      return { jobs: (data ?? []) as TraceJob[], ...traceHeaders(response.headers) };
    },
    enabled: id !== '',
    refetchInterval: poll,
  });
}

// ---------------------------------------------------------------- artifacts

/** One artifact of the list (GET /api/v1/artifacts), newest first: metadata, never content. */
export type ArtifactItem = Schemas['ArtifactListItem'];

export const ARTIFACT_PAGE_SIZE = 50;

export function useArtifacts(cursor?: string) {
  const api = useApi();
  const poll = usePollInterval();
  const query = cursor ? { limit: ARTIFACT_PAGE_SIZE, cursor } : { limit: ARTIFACT_PAGE_SIZE };
  return useQuery({
    queryKey: ['artifacts', query],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/artifacts', { params: { query } }));
      return { items: page.items ?? [], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
    refetchInterval: poll,
  });
}

export type ArtifactDetail = Schemas['ArtifactDetail'];

/** The id of an artifact from its pointer (`redis://art:<id>`), `art:<id>` or id. */
export function artifactId(ptr: string): string {
  return ptr.replace(/^redis:\/\//, '').replace(/^art:/, '');
}

export function useArtifact(ptr: string, enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['artifact', ptr],
    queryFn: () => unwrap(api.GET('/api/v1/artifacts/{ptr}', { params: { path: { ptr: artifactId(ptr) } } })),
    enabled: enabled && ptr !== '',
    // An artifact's content never changes.
    staleTime: Infinity,
  });
}

/** Content shown as text at most (bytes); more is cut, with a note. */
export const TEXT_LIMIT = 64 * 1024;

/** Base64 content as text: decoded as UTF-8 (bad bytes replaced), cut at `limit` bytes. */
export function decodeContent(base64: string, limit = TEXT_LIMIT): { text: string; bytes: number; truncated: boolean } {
  let binary: string;
  try {
    binary = atob(base64);
  } catch {
    return { text: '', bytes: 0, truncated: false };
  }
  const bytes = binary.length;
  const shown = Math.min(bytes, limit);
  const buffer = new Uint8Array(shown);
  for (let i = 0; i < shown; i += 1) buffer[i] = binary.charCodeAt(i);
  return { text: new TextDecoder('utf-8', { fatal: false }).decode(buffer), bytes, truncated: bytes > limit };
}

export const RETENTIONS = ['short', 'standard', 'audit'] as const;

export type NewArtifact = { content: string; content_type: string; retention: string };

export function useCreateArtifact() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (artifact: NewArtifact) =>
      unwrap(
        api.POST('/api/v1/artifacts', {
          body: {
            content: artifact.content,
            content_type: artifact.content_type || 'text/plain',
            retention: artifact.retention,
          },
        }),
      ),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['artifacts'] }),
  });
}

// ---------------------------------------------------------------- schemas and topics

export type SchemaRecord = Schemas['SchemaRecord'];
export type TopicItem = Schemas['TopicResponse'];

export const SCHEMA_PAGE_SIZE = 50;

export function useSchemas(cursor?: string) {
  const api = useApi();
  const query = cursor ? { limit: SCHEMA_PAGE_SIZE, cursor } : { limit: SCHEMA_PAGE_SIZE };
  return useQuery({
    queryKey: ['schemas', query],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/schemas', { params: { query } }));
      return { items: page.schemas ?? [], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
  });
}

export function useTopics(cursor?: string) {
  const api = useApi();
  const query = cursor ? { limit: SCHEMA_PAGE_SIZE, cursor } : { limit: SCHEMA_PAGE_SIZE };
  return useQuery({
    queryKey: ['topics', query],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/topics', { params: { query } }));
      return { items: page.items ?? [], nextCursor: page.next_cursor ?? '' };
    },
    placeholderData: keepPreviousData,
  });
}

export function useRegisterSchema() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: ({ id, schema }: { id: string; schema: Record<string, unknown> }) =>
      unwrap(api.POST('/api/v1/schemas', { body: { id, schema } })),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['schemas'] }),
  });
}

export function useDeleteSchema() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (id: string) => unwrap(api.DELETE('/api/v1/schemas/{id}', { params: { path: { id } } })),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['schemas'] }),
  });
}

/** What a failed schema deletion says: a schema a topic names is explained. */
export function deleteSchemaError(error: unknown): string {
  if (error instanceof ApiError && error.status === 409 && error.code === 'SCHEMA_IN_USE') {
    return `This schema is still in use: ${error.message}. Change or delete those topics first, then delete the schema.`;
  }
  return describeError(error);
}

// ---------------------------------------------------------------- config

export const SCOPES = ['system', 'org', 'team', 'workflow', 'step'] as const;
export type Scope = (typeof SCOPES)[number];

/** A config document with its envelope (`envelope=true`). */
export type ConfigDocument = {
  scope?: string;
  scope_id?: string;
  data?: Record<string, unknown>;
  revision?: number;
  updated_at?: string;
  meta?: Record<string, string>;
};

export type EffectiveConfig = Schemas['EffectiveConfig'];

/** The document at scope/id; `null` when there is none yet (404 config_not_found). */
export function useConfigDocument(scope: Scope, scopeId: string, enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['config', scope, scopeId],
    queryFn: async (): Promise<ConfigDocument | null> => {
      const query = { scope, envelope: 'true', ...(scopeId ? { scope_id: scopeId } : {}) };
      const { data, error, response } = await api.GET('/api/v1/config', { params: { query } });
      if (response.status === 404) {
        const failure = new ApiError(response.status, error);
        if (failure.code === 'config_not_found') return null;
        throw failure;
      }
      if (!response.ok) throw new ApiError(response.status, error);
      return (data ?? {}) as ConfigDocument;
    },
    enabled,
  });
}

export type EffectiveQuery = { team_id: string; workflow_id: string; step_id: string };

export function useEffectiveConfig(ids: EffectiveQuery, enabled: boolean) {
  const api = useApi();
  const query = Object.fromEntries(Object.entries(ids).filter(([, v]) => v.trim() !== '')) as Partial<EffectiveQuery>;
  return useQuery({
    queryKey: ['config', 'effective', query],
    queryFn: () => unwrap(api.GET('/api/v1/config/effective', { params: { query } })),
    enabled,
  });
}

export type ConfigChange = { scope: Scope; scope_id: string; data: Record<string, unknown>; revision: number };

export function useSaveConfig() {
  const api = useApi();
  const queryClient = useQueryClient();
  return useMutation({
    mutationFn: (change: ConfigChange) =>
      unwrap(
        api.PUT('/api/v1/config', {
          body: {
            scope: change.scope,
            ...(change.scope_id ? { scope_id: change.scope_id } : {}),
            data: change.data,
            revision: change.revision,
          },
        }),
      ),
    onSettled: () => queryClient.invalidateQueries({ queryKey: ['config'] }),
  });
}

/** What a failed config write says: a lost race is explained. */
export function saveConfigError(error: unknown): string {
  if (error instanceof ApiError && error.status === 409 && error.code === 'config_version_conflict') {
    return 'Someone else changed this document after you loaded it, so it was not saved. Reload it to see their change, then make yours again.';
  }
  return describeError(error);
}
