import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { DlqPage } from './DlqPage';

const ENTRY = {
  job_id: 'job-dead',
  topic: 'job.echo',
  error: 'worker crashed',
  original_state: 'FAILED',
  failed_at: '2026-01-01T10:00:00Z',
  retry_count: 2,
  tenant: 'default',
};

function routes(extra: FakeRoute[] = []): FakeRoute[] {
  return [{ path: '/api/v1/dlq/page', body: { items: [ENTRY], next_cursor: null } }, ...extra];
}

const open = () => renderPage(<DlqPage />, { path: '/dlq' });

describe('DlqPage', () => {
  it('lists entries with their reason', async () => {
    mockFetch(routes());
    open();
    const link = await screen.findByRole('link', { name: 'job-dead' });
    const row = link.closest('tr') as HTMLElement;
    expect(within(row).getByText('worker crashed')).toBeInTheDocument();
    expect(within(row).getByText('FAILED')).toBeInTheDocument();
  });

  it('retries an entry and links the new job', async () => {
    const { sent } = mockFetch(
      routes([{ method: 'POST', path: '/api/v1/dlq/job-dead/retry', body: { job_id: 'job-dead-retry-ab12' } }]),
    );
    open();
    const user = userEvent.setup();
    const row = (await screen.findByRole('link', { name: 'job-dead' })).closest('tr') as HTMLElement;

    await user.click(within(row).getByRole('button', { name: 'Retry' }));

    await waitFor(() => expect(sent.some((r) => r.method === 'POST' && r.url.pathname === '/api/v1/dlq/job-dead/retry')).toBe(true));
    expect(await screen.findByRole('link', { name: 'job-dead-retry-ab12' })).toHaveAttribute('href', '/jobs/job-dead-retry-ab12');
  });

  it('deletes an entry only after confirming', async () => {
    const { sent } = mockFetch(routes([{ method: 'DELETE', path: '/api/v1/dlq/job-dead', status: 204 }]));
    open();
    const user = userEvent.setup();
    const row = (await screen.findByRole('link', { name: 'job-dead' })).closest('tr') as HTMLElement;

    await user.click(within(row).getByRole('button', { name: 'Delete' }));
    expect(sent.some((r) => r.method === 'DELETE')).toBe(false);
    const dialog = screen.getByRole('alertdialog');
    expect(dialog).toHaveTextContent('Delete the DLQ entry of job job-dead?');
    await user.click(within(dialog).getByRole('button', { name: 'Yes, delete' }));

    await waitFor(() => expect(sent.some((r) => r.method === 'DELETE' && r.url.pathname === '/api/v1/dlq/job-dead')).toBe(true));
    expect(await screen.findByText('Deleted the DLQ entry of job job-dead.')).toBeInTheDocument();
  });

  it('says when a retry fails', async () => {
    mockFetch(
      routes([{ method: 'POST', path: '/api/v1/dlq/job-dead/retry', status: 404, body: { error: 'dlq entry not found', status: 404 } }]),
    );
    open();
    const user = userEvent.setup();
    const row = (await screen.findByRole('link', { name: 'job-dead' })).closest('tr') as HTMLElement;
    await user.click(within(row).getByRole('button', { name: 'Retry' }));
    expect(await screen.findByText(/Retry of job-dead failed: dlq entry not found/)).toBeInTheDocument();
  });

  it('says when the DLQ is empty', async () => {
    mockFetch([{ path: '/api/v1/dlq/page', body: { items: [], next_cursor: null } }]);
    open();
    expect(await screen.findByText('The DLQ is empty')).toBeInTheDocument();
  });
});
