/**
 * The gateway's HTTP API, typed from its OpenAPI document (`npm run generate` writes
 * ./schema.d.ts from dashboard/openapi.json).
 *
 * The dashboard is always served from the API's origin, so every path is relative to
 * it. The key and tenant of the session go on every call as headers, never in a URL.
 */

import createClient, { type Client } from 'openapi-fetch';
import { useMemo } from 'react';

import type { components, paths } from './schema';
import { useSession, type Session } from './session';

export type Schemas = components['schemas'];
export type ApiClient = Client<paths>;

/** A failed answer of the gateway: its status, and its `{"error", "code"}` body when it sent one. */
export class ApiError extends Error {
  status: number;
  code?: string;
  body: unknown;

  constructor(status: number, body: unknown, message?: string) {
    const fields = isRecord(body) ? body : {};
    const text = typeof fields.error === 'string' && fields.error ? fields.error : undefined;
    super(message ?? text ?? `The request failed with HTTP ${status}`);
    this.name = 'ApiError';
    this.status = status;
    this.code = typeof fields.code === 'string' && fields.code ? fields.code : undefined;
    this.body = body;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The origin the API is served from; the same as the dashboard's. */
function apiOrigin(): string {
  return typeof window === 'undefined' ? '' : window.location.origin;
}

export type ClientOptions = {
  session: Session | null;
  /** Called when the gateway answers 401: the key was refused or revoked. */
  onUnauthorized?: () => void;
};

/** A client that sends `session`'s key and tenant; outside React (the sign-in check uses it). */
export function createApiClient({ session, onUnauthorized }: ClientOptions): ApiClient {
  const headers: Record<string, string> = {};
  if (session) {
    headers['X-API-Key'] = session.apiKey;
    headers['X-Tenant-ID'] = session.tenant;
  }
  return createClient<paths>({
    baseUrl: apiOrigin(),
    headers,
    // Looked up at call time, so a fetch replaced after the client was made is used.
    fetch: async (request: Request) => {
      const response = await globalThis.fetch(request);
      if (response.status === 401) onUnauthorized?.();
      return response;
    },
  });
}

/** The API client of the signed-in session; a 401 signs the user out. */
export function useApi(): ApiClient {
  const { session, signOut } = useSession();
  return useMemo(() => createApiClient({ session, onUnauthorized: signOut }), [session, signOut]);
}

/** The data of an openapi-fetch call, or an {@link ApiError} for any answer that is not 2xx. */
export async function unwrap<T>(
  call: Promise<{ data?: T; error?: unknown; response: Response }>,
): Promise<T> {
  const { data, error, response } = await call;
  if (!response.ok) throw new ApiError(response.status, error);
  return data as T;
}

/** One line that says what went wrong, for an error shown to the user. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) {
    const code = error.code ? ` (${error.code})` : '';
    return `${error.message}${code}`;
  }
  if (error instanceof Error && error.message) {
    return error.message === 'Failed to fetch' ? 'The API could not be reached.' : error.message;
  }
  return 'Something went wrong.';
}
