import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage } from '@/testing';

import type { RunPage } from '../types';

import { RunsPage } from './RunsPage';

const FIRST_PAGE: RunPage = {
  items: [
    { id: 'run-b', workflow_id: 'orders-fetch', status: 'failed', started_at: '2026-11-26T08:01:00Z' },
    { id: 'run-a', workflow_id: 'orders-fetch', status: 'succeeded', started_at: '2026-11-26T08:00:00Z' },
  ],
  next_cursor: 'cursor-2',
};

const SECOND_PAGE: RunPage = {
  items: [{ id: 'run-0', workflow_id: 'invoices-send', status: 'cancelled' }],
  next_cursor: null,
};

function listRequests(sent: ReturnType<typeof mockFetch>['sent']) {
  return sent.filter((r) => r.url.pathname === '/api/v1/workflow-runs');
}

describe('RunsPage', () => {
  it('lists runs, each linked by its id', async () => {
    mockFetch([{ path: /^\/api\/v1\/workflow-runs(\?|$)/, body: FIRST_PAGE }]);
    renderPage(<RunsPage />, { path: '/runs', url: '/runs' });

    const link = await screen.findByRole('link', { name: 'run-b' });
    expect(link).toHaveAttribute('href', '/runs/run-b');
    expect(screen.getByRole('link', { name: 'run-a' })).toHaveAttribute('href', '/runs/run-a');
    const row = link.closest('tr');
    expect(row && within(row).getByText('failed')).toBeInTheDocument();
  });

  it('filters by status', async () => {
    const { sent } = mockFetch([{ path: /^\/api\/v1\/workflow-runs(\?|$)/, body: FIRST_PAGE }]);
    const { router } = renderPage(<RunsPage />, { path: '/runs', url: '/runs' });
    const user = userEvent.setup();

    await screen.findByRole('link', { name: 'run-b' });
    await user.selectOptions(screen.getByRole('combobox', { name: 'Status' }), 'failed');

    await waitFor(() => expect(listRequests(sent).at(-1)?.url.searchParams.get('status')).toBe('failed'));
    expect(router.state.location.search).toBe('?status=failed');
  });

  it('reads the filters from the address', async () => {
    const { sent } = mockFetch([{ path: /^\/api\/v1\/workflow-runs(\?|$)/, body: SECOND_PAGE }]);
    renderPage(<RunsPage />, { path: '/runs', url: '/runs?status=cancelled&workflow_id=invoices-send' });

    await screen.findByRole('link', { name: 'run-0' });
    const query = listRequests(sent)[0]?.url.searchParams;
    expect(query?.get('status')).toBe('cancelled');
    expect(query?.get('workflow_id')).toBe('invoices-send');
    expect(screen.getByRole('combobox', { name: 'Status' })).toHaveValue('cancelled');
  });

  it('pages on with the cursor the gateway gave', async () => {
    const { sent } = mockFetch([
      { path: /cursor=cursor-2/, body: SECOND_PAGE },
      { path: /^\/api\/v1\/workflow-runs(\?|$)/, body: FIRST_PAGE },
    ]);
    renderPage(<RunsPage />, { path: '/runs', url: '/runs' });
    const user = userEvent.setup();

    await screen.findByRole('link', { name: 'run-b' });
    await user.click(screen.getByRole('button', { name: 'Next page' }));

    expect(await screen.findByRole('link', { name: 'run-0' })).toBeInTheDocument();
    expect(listRequests(sent).at(-1)?.url.searchParams.get('cursor')).toBe('cursor-2');
  });

  it('says when there are no runs', async () => {
    mockFetch([{ path: /^\/api\/v1\/workflow-runs(\?|$)/, body: { items: [], next_cursor: null } }]);
    renderPage(<RunsPage />, { path: '/runs', url: '/runs' });

    expect(await screen.findByText(/No runs yet/)).toBeInTheDocument();
  });

  it('shows an error when the list cannot be read', async () => {
    mockFetch([{ path: /^\/api\/v1\/workflow-runs(\?|$)/, status: 503, body: { error: 'redis down', status: 503 } }]);
    renderPage(<RunsPage />, { path: '/runs', url: '/runs' });

    expect(await screen.findByRole('alert')).toBeInTheDocument();
  });
});
