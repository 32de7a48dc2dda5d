import { QueryClientProvider } from '@tanstack/react-query';
import { act, renderHook } from '@testing-library/react';
import type { ReactNode } from 'react';
import { describe, expect, it, vi } from 'vitest';

import { mockFetch, testQueryClient } from '@/testing';

import { unwrap, useApi } from './api';
import { readStoredSession, SESSION_STORAGE_KEY, SessionProvider, useSession } from './session';

function setup() {
  const queryClient = testQueryClient();
  const wrapper = ({ children }: { children: ReactNode }) => (
    <QueryClientProvider client={queryClient}>
      <SessionProvider>{children}</SessionProvider>
    </QueryClientProvider>
  );
  return { queryClient, wrapper };
}

describe('the session', () => {
  it('is kept in sessionStorage only, never in localStorage', () => {
    const setLocal = vi.spyOn(Storage.prototype, 'setItem');
    const { wrapper } = setup();
    const { result } = renderHook(() => useSession(), { wrapper });
    expect(result.current.session).toBeNull();

    act(() => result.current.signIn({ apiKey: 'k-1', tenant: 'acme' }));

    expect(result.current.session).toEqual({ apiKey: 'k-1', tenant: 'acme' });
    expect(JSON.parse(window.sessionStorage.getItem(SESSION_STORAGE_KEY) ?? '')).toEqual({ apiKey: 'k-1', tenant: 'acme' });
    expect(window.localStorage.length).toBe(0);
    for (const call of setLocal.mock.contexts) expect(call).toBe(window.sessionStorage);
  });

  it('is read back from sessionStorage (a reload of the tab)', () => {
    window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify({ apiKey: 'k-2', tenant: 'default' }));
    const { wrapper } = setup();
    const { result } = renderHook(() => useSession(), { wrapper });
    expect(result.current.session).toEqual({ apiKey: 'k-2', tenant: 'default' });
  });

  it('sign-out removes it and clears the query cache', () => {
    const { wrapper, queryClient } = setup();
    queryClient.setQueryData(['jobs'], { items: ['secret'] });
    const { result } = renderHook(() => useSession(), { wrapper });
    act(() => result.current.signIn({ apiKey: 'k-3', tenant: 'default' }));

    act(() => result.current.signOut());

    expect(result.current.session).toBeNull();
    expect(window.sessionStorage.getItem(SESSION_STORAGE_KEY)).toBeNull();
    expect(queryClient.getQueryData(['jobs'])).toBeUndefined();
  });

  it('forgets a damaged entry', () => {
    window.sessionStorage.setItem(SESSION_STORAGE_KEY, '{"apiKey": 5}');
    expect(readStoredSession()).toBeNull();
    expect(window.sessionStorage.getItem(SESSION_STORAGE_KEY)).toBeNull();
  });

  it('ends when the gateway answers 401', async () => {
    mockFetch([{ path: '/api/v1/status', status: 401, body: { error: 'unauthorized', status: 401 } }]);
    window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify({ apiKey: 'revoked', tenant: 'default' }));
    const { wrapper } = setup();
    const { result } = renderHook(() => ({ api: useApi(), state: useSession() }), { wrapper });

    await act(async () => {
      await unwrap(result.current.api.GET('/api/v1/status')).catch(() => {});
    });

    expect(result.current.state.session).toBeNull();
    expect(window.sessionStorage.getItem(SESSION_STORAGE_KEY)).toBeNull();
  });
});
