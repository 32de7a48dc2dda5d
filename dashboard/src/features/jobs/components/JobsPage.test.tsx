import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage } from '@/testing';

import { JobsPage } from './JobsPage';

const LONG_ID = 'ad190c9e-dbb0-4f04-9c9c-3cff1a83d9e7';

function page(ids: string[], next: string | null, state = 'SUCCEEDED') {
  return {
    items: ids.map((id) => ({ id, state, topic: 'job.echo', tenant: 'default', updated_at: '2026-01-01T10:00:00Z' })),
    next_cursor: next,
  };
}

describe('JobsPage', () => {
  it('lists jobs, each id a link whose text is the full id', async () => {
    mockFetch([{ path: '/api/v1/jobs', body: page([LONG_ID, 'job-2'], null) }]);
    renderPage(<JobsPage />, { path: '/jobs' });

    const link = await screen.findByRole('link', { name: LONG_ID });
    expect(link).toHaveAttribute('href', `/jobs/${LONG_ID}`);
    const row = link.closest('tr') as HTMLElement;
    expect(within(row).getByText('SUCCEEDED')).toBeInTheDocument();
    expect(within(row).getByText('job.echo')).toBeInTheDocument();
    expect(screen.getByRole('columnheader', { name: 'Job ID' })).toBeInTheDocument();
  });

  it('sends the state and topic filters and keeps them in the address', async () => {
    const { sent } = mockFetch([{ path: '/api/v1/jobs', body: page(['job-1'], null) }]);
    renderPage(<JobsPage />, { path: '/jobs' });
    const user = userEvent.setup();
    await screen.findByRole('link', { name: 'job-1' });

    await user.selectOptions(screen.getByRole('combobox', { name: 'State' }), 'FAILED');
    await waitFor(() => expect(sent.at(-1)?.url.searchParams.get('state')).toBe('FAILED'));
    await user.type(screen.getByRole('searchbox', { name: 'Topic' }), 'job.echo');
    await user.click(screen.getByRole('button', { name: 'Apply filters' }));

    await waitFor(() => expect(sent.at(-1)?.url.searchParams.get('topic')).toBe('job.echo'));
    const last = sent.at(-1)!.url.searchParams;
    expect(last.get('state')).toBe('FAILED');
    expect(last.get('limit')).toBe('50');
    expect(last.has('cursor')).toBe(false);
    expect(screen.getByTestId('location')).toHaveTextContent('/jobs?state=FAILED&topic=job.echo');
  });

  it('opens with the filters of the address', async () => {
    const { sent } = mockFetch([{ path: '/api/v1/jobs', body: page(['job-1'], null, 'RUNNING') }]);
    renderPage(<JobsPage />, { path: '/jobs', url: '/jobs?state=RUNNING' });
    await screen.findByRole('link', { name: 'job-1' });
    expect(sent[0].url.searchParams.get('state')).toBe('RUNNING');
    expect(screen.getByRole('combobox', { name: 'State' })).toHaveValue('RUNNING');
  });

  it('follows the cursor to the next page and back to the first', async () => {
    const { sent } = mockFetch([
      {
        path: '/api/v1/jobs',
        respond: (r) => json(r.url.searchParams.get('cursor') === 'c-2' ? page(['job-3'], null) : page(['job-1', 'job-2'], 'c-2')),
      },
    ]);
    renderPage(<JobsPage />, { path: '/jobs' });
    const user = userEvent.setup();
    await screen.findByRole('link', { name: 'job-1' });

    await user.click(screen.getByRole('button', { name: 'Next page' }));
    expect(await screen.findByRole('link', { name: 'job-3' })).toBeInTheDocument();
    expect(sent.at(-1)?.url.searchParams.get('cursor')).toBe('c-2');
    expect(screen.getByRole('button', { name: 'Next page' })).toBeDisabled();

    await user.click(screen.getByRole('button', { name: 'First page' }));
    expect(await screen.findByRole('link', { name: 'job-1' })).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'First page' })).toBeDisabled();
  });

  it('says when no job matches, and when the list cannot be read', async () => {
    mockFetch([{ path: '/api/v1/jobs', body: page([], null) }]);
    const first = renderPage(<JobsPage />, { path: '/jobs', url: '/jobs?state=DENIED' });
    expect(await screen.findByText('No jobs match these filters')).toBeInTheDocument();
    first.unmount();

    mockFetch([{ path: '/api/v1/jobs', status: 503, body: { error: 'store unavailable', code: 'store_unavailable', status: 503 } }]);
    renderPage(<JobsPage />, { path: '/jobs' });
    expect(await screen.findByRole('alert')).toHaveTextContent('store unavailable');
    expect(screen.getByRole('button', { name: 'Try again' })).toBeInTheDocument();
  });
});
