import { screen, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage } from '@/testing';

import { WorkflowsPage } from './WorkflowsPage';

describe('WorkflowsPage', () => {
  it('lists the definitions, each linked to its page', async () => {
    mockFetch([
      {
        path: '/api/v1/workflows',
        body: [
          { id: 'example-approval', name: 'Echo with approval', version: '1', steps: { a: { id: 'a', type: 'worker' }, b: { id: 'b', type: 'delay' } } },
          { id: 'orders-fetch', name: 'Fetch an order', steps: { fetch: { id: 'fetch', type: 'worker' } } },
        ],
      },
    ]);
    renderPage(<WorkflowsPage />, { path: '/workflows', url: '/workflows' });

    const link = await screen.findByRole('link', { name: 'example-approval' });
    expect(link).toHaveAttribute('href', '/workflows/example-approval');
    const row = link.closest('tr');
    expect(row).not.toBeNull();
    if (row) {
      expect(within(row).getByText('Echo with approval')).toBeInTheDocument();
      expect(within(row).getByText('2')).toBeInTheDocument();
    }
    expect(screen.getByRole('link', { name: 'orders-fetch' })).toBeInTheDocument();
  });

  it('says when there is no definition yet', async () => {
    mockFetch([{ path: '/api/v1/workflows', body: [] }]);
    renderPage(<WorkflowsPage />, { path: '/workflows', url: '/workflows' });

    expect(await screen.findByText(/No workflows yet/)).toBeInTheDocument();
  });

  it('shows an error when the list cannot be read', async () => {
    mockFetch([{ path: '/api/v1/workflows', status: 403, body: { error: 'forbidden', status: 403 } }]);
    renderPage(<WorkflowsPage />, { path: '/workflows', url: '/workflows' });

    expect(await screen.findByRole('alert')).toBeInTheDocument();
  });
});
