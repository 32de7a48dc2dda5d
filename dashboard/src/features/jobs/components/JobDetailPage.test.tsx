import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { JobDetailPage } from './JobDetailPage';

const ID = 'job-7f3a';

const BASE = {
  id: ID,
  topic: 'job.echo',
  tenant: 'default',
  trace_id: 'trace-1',
  created_at: '2026-01-01T10:00:00Z',
  updated_at: '2026-01-01T10:00:05Z',
  started_at: '2026-01-01T10:00:02Z',
  completed_at: '2026-01-01T10:00:05Z',
  prompt: 'hello',
  labels: {},
  decisions: [],
};

const DECISIONS = [
  { rule_id: 'allow-echo', action: 'ALLOW', reason: 'echo is harmless', evaluated_at: '2026-01-01T10:00:01Z' },
];

function routes(job: object, extra: FakeRoute[] = []): FakeRoute[] {
  return [
    { path: `/api/v1/jobs/${ID}`, body: job },
    { path: `/api/v1/jobs/${ID}/decisions`, body: DECISIONS },
    ...extra,
  ];
}

function open() {
  return renderPage(<JobDetailPage />, { path: '/jobs/:id', url: `/jobs/${ID}` });
}

const outputSection = () => screen.findByRole('region', { name: 'Output' });

describe('JobDetailPage', () => {
  it('shows the job: heading with its id, state, timeline, decisions, input and result', async () => {
    mockFetch(routes({ ...BASE, state: 'SUCCEEDED', result: { echo: 'hello' }, result_ptr: `redis://res:${ID}` }));
    open();

    expect(await screen.findByRole('heading', { level: 1, name: new RegExp(ID) })).toBeInTheDocument();
    const output = await outputSection();
    expect(screen.getAllByText('SUCCEEDED').length).toBeGreaterThan(0);
    const timeline = screen.getByRole('region', { name: 'Timeline' });
    const steps = within(timeline).getAllByRole('listitem').map((li) => li.textContent);
    expect(steps[0]).toContain('Submitted');
    expect(steps[1]).toContain('Policy: ALLOW (rule allow-echo)');
    expect(steps[2]).toContain('Running');
    expect(steps[3]).toContain('Finished: SUCCEEDED');
    const decisions = screen.getByRole('region', { name: 'Safety decisions' });
    expect(await within(decisions).findByText('echo is harmless')).toBeInTheDocument();
    expect(within(screen.getByRole('region', { name: 'Input' })).getByText('hello')).toBeInTheDocument();
    expect(within(output).getByText(/"echo": "hello"/)).toBeInTheDocument();
    expect(screen.queryByRole('button', { name: 'Cancel job' })).not.toBeInTheDocument();
  });

  it('says a quarantined output is quarantined and does not show it', async () => {
    mockFetch(
      routes({
        ...BASE,
        state: 'OUTPUT_QUARANTINED',
        result: { secret: 'do not show' },
        output_decision: 'QUARANTINE',
        output_safety: { decision: 'QUARANTINE', quarantined: true, reason: 'contains a credential', phase: 'async' },
      }),
    );
    open();

    expect(within(await outputSection()).getByText(/Output quarantined/)).toHaveTextContent('contains a credential');
    expect(screen.queryByText(/do not show/)).not.toBeInTheDocument();
  });

  it('says a redacted output is redacted instead of showing it', async () => {
    mockFetch(
      routes({
        ...BASE,
        state: 'SUCCEEDED',
        result: { text: '[REDACTED] and more' },
        result_ptr: `redis://res:${ID}:redacted`,
        output_decision: 'REDACT',
        output_safety: { decision: 'REDACT', quarantined: false, reason: 'PII', phase: 'async' },
      }),
    );
    open();

    expect(within(await outputSection()).getByText(/Output redacted/)).toBeInTheDocument();
    expect(screen.queryByText(/and more/)).not.toBeInTheDocument();
  });

  it('cancels an open job after confirming', async () => {
    const { sent } = mockFetch(
      routes({ ...BASE, state: 'RUNNING', completed_at: null }, [
        { method: 'POST', path: `/api/v1/jobs/${ID}/cancel`, body: { id: ID, state: 'CANCELLED' } },
      ]),
    );
    open();
    const user = userEvent.setup();

    await user.click(await screen.findByRole('button', { name: 'Cancel job' }));
    const dialog = screen.getByRole('alertdialog');
    expect(dialog).toHaveTextContent(`Cancel job ${ID}?`);
    expect(sent.some((r) => r.method === 'POST')).toBe(false);
    await user.click(within(dialog).getByRole('button', { name: 'Yes, cancel job' }));

    await waitFor(() => expect(sent.some((r) => r.method === 'POST' && r.url.pathname === `/api/v1/jobs/${ID}/cancel`)).toBe(true));
  });

  it('does not cancel when the confirmation is dismissed', async () => {
    const { sent } = mockFetch(routes({ ...BASE, state: 'PENDING', completed_at: null, started_at: null }));
    open();
    const user = userEvent.setup();

    await user.click(await screen.findByRole('button', { name: 'Cancel job' }));
    await user.keyboard('{Escape}');
    expect(screen.queryByRole('alertdialog')).not.toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'Cancel job' })).toHaveFocus();
    expect(sent.some((r) => r.method === 'POST')).toBe(false);
  });

  it('shows an error when the job cannot be read', async () => {
    mockFetch([{ path: `/api/v1/jobs/${ID}`, status: 404, body: { error: 'job not found', code: 'not_found', status: 404 } }]);
    open();
    expect(await screen.findByRole('alert')).toHaveTextContent('job not found');
  });
});
