import { screen, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage } from '@/testing';

import { byPool } from '../api';
import { WorkersPage } from './WorkersPage';

const WORKERS = [
  { worker_id: 'echo-2', pool: 'echo', active_jobs: 1, max_parallel_jobs: 4, cpu_load: 12.4, online: true, last_heartbeat: '2026-01-01T10:00:00Z', heartbeat_age_seconds: 3 },
  { worker_id: 'echo-1', pool: 'echo', active_jobs: 2, max_parallel_jobs: 4, online: false, last_heartbeat: '2026-01-01T09:00:00Z', heartbeat_age_seconds: 3600 },
  { worker_id: 'gpu-1', pool: 'gpu', active_jobs: 0, max_parallel_jobs: 1, online: true, capabilities: ['llm', 'vision'] },
];

describe('WorkersPage', () => {
  it('groups workers by pool with their load and last heartbeat', async () => {
    mockFetch([{ path: '/api/v1/workers', body: { items: WORKERS } }]);
    renderPage(<WorkersPage />, { path: '/workers' });

    const echo = await screen.findByRole('region', { name: 'Pool echo' });
    expect(within(echo).getByText(/1 of 2 online · 3 active jobs of 8 slots/)).toBeInTheDocument();
    const row = within(echo).getByRole('rowheader', { name: 'echo-1' }).closest('tr') as HTMLElement;
    expect(within(row).getByText('offline')).toBeInTheDocument();
    expect(within(row).getByText('(1 h ago)')).toBeInTheDocument();
    const gpu = screen.getByRole('region', { name: 'Pool gpu' });
    expect(within(gpu).getByText('llm, vision')).toBeInTheDocument();
  });

  it('says when there are no workers', async () => {
    mockFetch([{ path: '/api/v1/workers', body: { items: [] } }]);
    renderPage(<WorkersPage />, { path: '/workers' });
    expect(await screen.findByText('No workers')).toBeInTheDocument();
  });

  it('sorts pools and their workers by name', () => {
    const pools = byPool(WORKERS);
    expect(pools.map((p) => p.name)).toEqual(['echo', 'gpu']);
    expect(pools[0].workers.map((w) => w.worker_id)).toEqual(['echo-1', 'echo-2']);
  });
});
