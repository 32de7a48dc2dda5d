import { screen, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage } from '@/testing';

import { TracePage } from './TracePage';

const JOBS = [
  {
    id: 'job-b',
    topic: 'job.echo',
    state: 'RUNNING',
    trace_id: 'tr-1',
    created_at: '2026-01-01T10:00:05Z',
    updated_at: '2026-01-01T10:00:10Z',
  },
  {
    id: 'job-a',
    topic: 'job.plan',
    state: 'SUCCEEDED',
    trace_id: 'tr-1',
    created_at: '2026-01-01T10:00:00Z',
    updated_at: '2026-01-01T10:00:04Z',
    completed_at: '2026-01-01T10:00:04Z',
  },
];

function traceRoute(headers: Record<string, string> = {}) {
  return {
    path: '/api/v1/traces/tr-1',
    respond: () =>
      new Response(JSON.stringify(JOBS), { status: 200, headers: { 'Content-Type': 'application/json', ...headers } }),
  };
}

describe('TracePage', () => {
  it('shows every job on one timeline and in a table, linked to the job', async () => {
    mockFetch([traceRoute({ 'X-Total-Count': '2', 'X-Has-More': 'false' })]);
    renderPage(<TracePage />, { path: '/traces/:id', url: '/traces/tr-1' });

    expect(await screen.findByRole('heading', { level: 1, name: 'Trace tr-1' })).toBeInTheDocument();
    const timeline = await screen.findByRole('region', { name: 'Timeline' });
    const bars = within(timeline).getAllByRole('listitem');
    // Oldest first, labelled with topic and state in words, linking to the job.
    expect(bars[0]).toHaveTextContent('job.plan SUCCEEDED');
    expect(within(bars[0]).getByRole('link')).toHaveAttribute('href', '/jobs/job-a');
    expect(bars[1]).toHaveTextContent('job.echo RUNNING');
    // Bars placed on the 10 s axis: job-a 0–4 s, job-b 5–10 s.
    const rects = timeline.querySelectorAll('rect');
    expect(rects[0].getAttribute('x')).toBe('0%');
    expect(rects[0].getAttribute('width')).toBe('40%');
    expect(rects[1].getAttribute('x')).toBe('50%');
    expect(rects[1].getAttribute('width')).toBe('50%');

    const table = screen.getByRole('table');
    expect(within(table).getByRole('link', { name: 'job-a' })).toHaveAttribute('href', '/jobs/job-a');
    expect(within(table).getByRole('link', { name: 'job-b' })).toBeInTheDocument();
    expect(within(table).getByText('4 s')).toBeInTheDocument();
    expect(screen.queryByRole('note')).not.toBeInTheDocument();
  });

  it('says when the trace holds more jobs than shown', async () => {
    mockFetch([traceRoute({ 'X-Total-Count': '250', 'X-Has-More': 'true' })]);
    renderPage(<TracePage />, { path: '/traces/:id', url: '/traces/tr-1' });
    expect(await screen.findByRole('note')).toHaveTextContent('This trace holds 250 jobs; only the newest 2 are shown');
  });

  it('says a trace without jobs of the tenant is empty', async () => {
    mockFetch([
      {
        path: '/api/v1/traces/nope',
        respond: () => json({ error: 'trace not found', code: 'trace_not_found', status: 404 }, 404),
      },
    ]);
    renderPage(<TracePage />, { path: '/traces/:id', url: '/traces/nope' });
    expect(await screen.findByText('No jobs in this trace')).toBeInTheDocument();
  });

  it('shows a failure with a retry', async () => {
    mockFetch([{ path: '/api/v1/traces/tr-1', status: 503, body: { error: 'store down', code: 'store_unavailable' } }]);
    renderPage(<TracePage />, { path: '/traces/:id', url: '/traces/tr-1' });
    expect(await screen.findByRole('alert')).toHaveTextContent('store down (store_unavailable)');
    expect(screen.getByRole('button', { name: 'Try again' })).toBeInTheDocument();
  });

  it('opens a trace by id from the form', async () => {
    mockFetch([traceRoute()]);
    renderPage(<TracePage />, { path: '/traces', url: '/traces' });
    expect(screen.getByRole('heading', { level: 1, name: 'Traces' })).toBeInTheDocument();
    await userEvent.type(screen.getByLabelText('Trace ID'), 'tr 1/x');
    await userEvent.click(screen.getByRole('button', { name: 'Open trace' }));
    expect(screen.getByTestId('location')).toHaveTextContent('/traces/tr%201%2Fx');
  });
});
