import { describe, expect, it, vi } from 'vitest';

import { mockFetch } from '@/testing';

import { ApiError, createApiClient, describeError, unwrap } from './api';

describe('the API client', () => {
  it('sends the key and tenant as headers on every call, and nothing in the URL', async () => {
    const { sent } = mockFetch([{ path: '/api/v1/jobs', body: { items: [], next_cursor: null } }]);
    const api = createApiClient({ session: { apiKey: 'secret-key', tenant: 'acme' } });

    await unwrap(api.GET('/api/v1/jobs', { params: { query: { limit: 5, state: 'FAILED' } } }));

    expect(sent).toHaveLength(1);
    expect(sent[0].headers.get('X-API-Key')).toBe('secret-key');
    expect(sent[0].headers.get('X-Tenant-ID')).toBe('acme');
    expect(sent[0].url.origin).toBe(window.location.origin);
    expect(sent[0].url.pathname).toBe('/api/v1/jobs');
    expect(sent[0].url.search).toBe('?limit=5&state=FAILED');
    expect(sent[0].url.href).not.toContain('secret-key');
  });

  it('maps an error answer to ApiError with status, code and body', async () => {
    const body = { error: 'approval already resolved', code: 'approval_already_resolved', status: 409 };
    mockFetch([{ method: 'POST', path: '/api/v1/approvals/j1/approve', status: 409, body }]);
    const api = createApiClient({ session: { apiKey: 'k', tenant: 'default' } });

    const error = await unwrap(
      api.POST('/api/v1/approvals/{job_id}/approve', { params: { path: { job_id: 'j1' } }, body: { reason: 'ok' } }),
    ).catch((e: unknown) => e);

    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ status: 409, code: 'approval_already_resolved', body });
    expect((error as ApiError).message).toBe('approval already resolved');
    expect(describeError(error)).toBe('approval already resolved (approval_already_resolved)');
  });

  it('maps an answer without a JSON body too', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response('Bad Gateway', { status: 502 })));
    const api = createApiClient({ session: null });
    const error = (await unwrap(api.GET('/api/v1/status')).catch((e: unknown) => e)) as ApiError;
    expect(error).toBeInstanceOf(ApiError);
    expect(error.status).toBe(502);
    expect(error.code).toBeUndefined();
    expect(error.message).toBe('The request failed with HTTP 502');
  });

  it('reports a 401 so the session can end', async () => {
    mockFetch([{ path: '/api/v1/status', status: 401, body: { error: 'unauthorized', code: 'unauthorized', status: 401 } }]);
    const onUnauthorized = vi.fn();
    const api = createApiClient({ session: { apiKey: 'old', tenant: 'default' }, onUnauthorized });
    await expect(unwrap(api.GET('/api/v1/status'))).rejects.toMatchObject({ status: 401 });
    expect(onUnauthorized).toHaveBeenCalledTimes(1);
  });

  it('returns nothing for a 204', async () => {
    mockFetch([{ method: 'DELETE', path: '/api/v1/dlq/j1', status: 204 }]);
    const api = createApiClient({ session: { apiKey: 'k', tenant: 'default' } });
    await expect(unwrap(api.DELETE('/api/v1/dlq/{job_id}', { params: { path: { job_id: 'j1' } } }))).resolves.toBeUndefined();
  });

  it('says the API could not be reached when fetch itself fails', () => {
    expect(describeError(new TypeError('Failed to fetch'))).toBe('The API could not be reached.');
  });
});
