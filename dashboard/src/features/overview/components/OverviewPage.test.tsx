import { screen, within } from '@testing-library/react';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage } from '@/testing';

import { countStates } from '../api';
import { OverviewPage } from './OverviewPage';

const STATUS = {
  time: '2026-01-01T10:00:00Z',
  uptime_seconds: 7200,
  build: { version: '0.9.0' },
  redis: { connected: true },
  nats: { connected: false },
  workers: 3,
  circuit_breakers: {
    input: { state: 'CLOSED', failures: 0, fail_threshold: 5, cooldown_remaining_ms: 0 },
    output: { state: 'OPEN', failures: 5, fail_threshold: 5, cooldown_remaining_ms: 20000 },
  },
};

const JOBS = {
  items: [
    { id: 'a', state: 'SUCCEEDED' },
    { id: 'b', state: 'FAILED' },
    { id: 'c', state: 'SUCCEEDED' },
  ],
  next_cursor: null,
};

describe('OverviewPage', () => {
  it('shows each part, workers, breakers and jobs by state', async () => {
    const { sent } = mockFetch([
      { path: '/api/v1/status', body: STATUS },
      { path: '/api/v1/jobs', body: JOBS },
    ]);
    renderPage(<OverviewPage />, { path: '/' });

    const health = await screen.findByRole('region', { name: 'Health' });
    const redis = (await within(health).findByRole('rowheader', { name: 'Redis' })).closest('tr') as HTMLElement;
    expect(within(redis).getByText('connected')).toBeInTheDocument();
    const nats = within(health).getByRole('rowheader', { name: 'NATS' }).closest('tr') as HTMLElement;
    expect(within(nats).getByText('disconnected')).toBeInTheDocument();

    expect(within(screen.getByRole('region', { name: 'Workers' })).getByText('3')).toBeInTheDocument();
    const breakers = screen.getByRole('region', { name: 'Circuit breakers' });
    const output = within(breakers).getByRole('rowheader', { name: 'output' }).closest('tr') as HTMLElement;
    expect(within(output).getByText('OPEN')).toBeInTheDocument();

    const states = screen.getByRole('region', { name: 'Jobs by state' });
    const succeeded = (await within(states).findByRole('link', { name: 'SUCCEEDED' })).closest('tr') as HTMLElement;
    expect(within(succeeded).getByText('2')).toBeInTheDocument();
    expect(within(screen.getByRole('region', { name: 'Live events' })).getByText(/events per second/)).toBeInTheDocument();
    expect(sent.find((r) => r.url.pathname === '/api/v1/jobs')?.url.searchParams.get('limit')).toBe('200');
  });

  it('shows the error when the status cannot be read', async () => {
    mockFetch([{ path: '/api/v1/status', status: 503, body: { error: 'redis down', code: 'store_unavailable', status: 503 } }]);
    renderPage(<OverviewPage />, { path: '/' });
    const health = await screen.findByRole('region', { name: 'Health' });
    expect(await within(health).findByRole('alert')).toHaveTextContent('redis down');
  });

  it('counts states, most first', () => {
    expect(countStates(['A', 'B', 'A', ''])).toEqual([
      ['A', 2],
      ['B', 1],
      ['UNKNOWN', 1],
    ]);
  });
});
