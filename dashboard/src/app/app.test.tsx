import { QueryClientProvider } from '@tanstack/react-query';
import { act, render, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { createMemoryRouter, RouterProvider } from 'react-router';
import { describe, expect, it } from 'vitest';

import { SESSION_STORAGE_KEY, SessionProvider } from '@/lib/session';
import { mockFetch, testQueryClient, type FakeRoute } from '@/testing';

import { routes } from './routes';

const API: FakeRoute[] = [
  { path: '/api/v1/status', body: { redis: { connected: true }, nats: { connected: true }, workers: 0 } },
  { path: '/api/v1/jobs', body: { items: [], next_cursor: null } },
];

function open(url: string, signedIn: boolean) {
  if (signedIn) {
    window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify({ apiKey: 'k', tenant: 'default' }));
  }
  const router = createMemoryRouter(routes, { initialEntries: [url] });
  render(
    <QueryClientProvider client={testQueryClient()}>
      <SessionProvider>
        <RouterProvider router={router} />
      </SessionProvider>
    </QueryClientProvider>,
  );
  return router;
}

describe('the app', () => {
  it('sends a visitor who is not signed in to the sign-in page, and back after', async () => {
    mockFetch(API);
    const router = open('/jobs', false);
    expect(await screen.findByLabelText('API key')).toBeInTheDocument();
    expect(router.state.location.pathname).toBe('/sign-in');

    const user = userEvent.setup();
    await user.type(screen.getByLabelText('API key'), 'k');
    await user.click(screen.getByRole('button', { name: 'Sign in' }));
    expect(await screen.findByRole('heading', { level: 1, name: 'Jobs' })).toBeInTheDocument();
    expect(router.state.location.pathname).toBe('/jobs');
  });

  it('frames signed-in pages with a skip link, landmarks, navigation and the live state', async () => {
    mockFetch(API);
    open('/', true);
    expect(await screen.findByRole('heading', { level: 1, name: 'Overview' })).toBeInTheDocument();

    expect(screen.getByRole('link', { name: 'Skip to main content' })).toHaveAttribute('href', '#main');
    expect(screen.getByRole('banner')).toBeInTheDocument();
    expect(screen.getByRole('main')).toHaveAttribute('id', 'main');
    const nav = screen.getByRole('navigation', { name: 'Main' });
    expect(within(nav).getAllByRole('link').map((a) => a.textContent)).toEqual([
      'Overview',
      'Jobs',
      'Approvals',
      'Workflows',
      'Runs',
      'DLQ',
      'Workers',
      'Policy',
      'Replay',
      'Analytics',
      'Audit',
      'Traces',
      'Artifacts',
      'Schemas',
      'Config',
    ]);
    expect(within(nav).getByRole('list', { name: 'Govern' })).toBeInTheDocument();
    expect(within(nav).getByRole('link', { name: 'Overview' })).toHaveAttribute('aria-current', 'page');
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent(/Connecting|Reconnecting|Polling|Live/);
  });

  it('signs out: the session is gone and the sign-in page shows', async () => {
    mockFetch(API);
    const router = open('/', true);
    const user = userEvent.setup();
    await user.click(await screen.findByRole('button', { name: 'Sign out' }));
    expect(await screen.findByLabelText('API key')).toBeInTheDocument();
    expect(router.state.location.pathname).toBe('/sign-in');
    expect(window.sessionStorage.getItem(SESSION_STORAGE_KEY)).toBeNull();
  });

  it('routes the workflow and run pages of the other feature folders', async () => {
    mockFetch([
      ...API,
      { path: '/api/v1/workflows', body: { items: [] } },
      { path: /^\/api\/v1\/workflow-runs/, body: { items: [], next_cursor: null } },
    ]);
    const router = open('/workflows', true);
    expect(await screen.findByRole('heading', { level: 1, name: 'Workflows' })).toBeInTheDocument();
    await act(() => router.navigate('/runs'));
    expect(await screen.findByRole('heading', { level: 1, name: 'Runs' })).toBeInTheDocument();
  });

  it('says when a page does not exist', async () => {
    mockFetch(API);
    open('/nowhere', true);
    expect(await screen.findByRole('heading', { level: 1, name: 'Page not found' })).toBeInTheDocument();
    await waitFor(() => expect(document.title).toBe('Page not found · Cordum'));
  });
});
