/** Renders a page as the app does: a query client, a session, a router at a URL. */

import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { render } from '@testing-library/react';
import type { ReactElement } from 'react';
import { createMemoryRouter, RouterProvider, useLocation } from 'react-router';

import { SESSION_STORAGE_KEY, SessionProvider, type Session } from '@/lib/session';

export const TEST_SESSION: Session = { apiKey: 'test-key', tenant: 'default' };

export function testQueryClient() {
  return new QueryClient({
    defaultOptions: { queries: { retry: false, gcTime: Infinity }, mutations: { retry: false } },
  });
}

function Where() {
  const location = useLocation();
  return <p data-testid="location">{location.pathname + location.search}</p>;
}

export type RenderPageOptions = {
  /** The route pattern `element` is mounted at, e.g. '/jobs/:id'. */
  path: string;
  /** The URL to open; `path` when not given. */
  url?: string;
  /** Signed in as this (default {@link TEST_SESSION}); null: signed out. */
  session?: Session | null;
};

export function renderPage(element: ReactElement, { path, url, session = TEST_SESSION }: RenderPageOptions) {
  if (session) window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify(session));
  const queryClient = testQueryClient();
  const router = createMemoryRouter(
    [
      { path, element: <>{element}<Where /></> },
      { path: '*', element: <Where /> },
    ],
    { initialEntries: [url ?? path] },
  );
  const view = render(
    <QueryClientProvider client={queryClient}>
      <SessionProvider>
        <RouterProvider router={router} />
      </SessionProvider>
    </QueryClientProvider>,
  );
  return { ...view, router, queryClient };
}
