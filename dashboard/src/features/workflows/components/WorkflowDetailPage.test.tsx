import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage, type FakeRoute } from '@/testing';

import type { WorkflowDefinition } from '../types';

import { WorkflowDetailPage } from './WorkflowDetailPage';

// config/workflows/example.json
const EXAMPLE: WorkflowDefinition = {
  id: 'example-approval',
  name: 'Echo with approval',
  description: 'Amounts of 100 or more wait for a human approval.',
  version: '1',
  input_schema: {
    type: 'object',
    required: ['message', 'amount'],
    properties: {
      message: { type: 'string' },
      amount: { type: 'integer', minimum: 0 },
      urgent: { type: 'boolean' },
      channel: { type: 'string', enum: ['email', 'sms'] },
      tags: { type: 'array', items: { type: 'string' } },
    },
  },
  steps: {
    needs_approval: { id: 'needs_approval', type: 'condition', condition: 'input.amount >= 100' },
    approve: { id: 'approve', type: 'approval', depends_on: ['needs_approval'] },
    echo: { id: 'echo', type: 'worker', topic: 'job.echo', depends_on: ['approve'] },
  },
};

const NO_SCHEMA: WorkflowDefinition = {
  id: 'orders-fetch',
  name: 'Fetch an order',
  steps: { fetch: { id: 'fetch', type: 'worker', topic: 'job.echo' } },
};

function routes(def: WorkflowDefinition, extra: FakeRoute[] = []): FakeRoute[] {
  return [
    ...extra,
    { path: `/api/v1/workflows/${def.id}`, body: def },
    { path: `/api/v1/workflows/${def.id}/runs`, body: [{ id: 'old-run', status: 'succeeded' }] },
  ];
}

function startRequests(sent: ReturnType<typeof mockFetch>['sent']) {
  return sent.filter((r) => r.method === 'POST' && r.url.pathname.endsWith('/runs'));
}

describe('WorkflowDetailPage', () => {
  it('shows the definition, its steps and its recent runs', async () => {
    mockFetch(routes(EXAMPLE));
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/example-approval' });

    expect(await screen.findByRole('heading', { level: 1, name: 'Echo with approval' })).toBeInTheDocument();
    const steps = screen.getByRole('region', { name: 'Steps' });
    const rows = within(steps).getAllByRole('row').slice(1);
    expect(rows.map((r) => within(r).getAllByRole('cell').slice(0, 3).map((c) => c.textContent))).toEqual([
      ['needs_approval', 'condition', '—'],
      ['approve', 'approval', 'needs_approval'],
      ['echo', 'worker', 'approve'],
    ]);
    expect(within(steps).getByText('topic job.echo')).toBeInTheDocument();
    expect(await screen.findByRole('link', { name: 'old-run' })).toHaveAttribute('href', '/runs/old-run');
  });

  it('builds labelled inputs from the input schema, required ones marked', async () => {
    mockFetch(routes(EXAMPLE));
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/example-approval' });

    const message = await screen.findByRole('textbox', { name: 'message' });
    expect(message).toBeRequired();
    const amount = screen.getByRole('spinbutton', { name: 'amount' });
    expect(amount).toBeRequired();
    expect(screen.getByRole('checkbox', { name: 'urgent' })).not.toBeRequired();
    expect(screen.getByRole('combobox', { name: 'channel' })).toBeInTheDocument();
    expect(screen.getByRole('textbox', { name: 'tags (JSON)' })).toBeInTheDocument();
  });

  it('checks the input before sending it', async () => {
    const { sent } = mockFetch(routes(EXAMPLE));
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/example-approval' });
    const user = userEvent.setup();

    await user.type(await screen.findByRole('spinbutton', { name: 'amount' }), '2.5');
    await user.click(screen.getByRole('button', { name: 'Start run' }));

    expect(await screen.findByText('2 fields need attention.')).toBeInTheDocument();
    expect(screen.getByRole('textbox', { name: 'message' })).toHaveAccessibleDescription('Required.');
    expect(screen.getByRole('spinbutton', { name: 'amount' })).toHaveAccessibleDescription('Must be a whole number.');
    expect(startRequests(sent)).toHaveLength(0);
  });

  it('starts a run with the typed input and opens it', async () => {
    const { sent } = mockFetch(
      routes(EXAMPLE, [
        { method: 'POST', path: '/api/v1/workflows/example-approval/runs', body: { run_id: 'run-42' } },
      ]),
    );
    const { router } = renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/example-approval' });
    const user = userEvent.setup();

    await user.type(await screen.findByRole('textbox', { name: 'message' }), 'hello');
    await user.type(screen.getByRole('spinbutton', { name: 'amount' }), '250');
    await user.click(screen.getByRole('checkbox', { name: 'urgent' }));
    await user.selectOptions(screen.getByRole('combobox', { name: 'channel' }), 'sms');
    await user.type(screen.getByRole('textbox', { name: 'tags (JSON)' }), '[["a"]' /* "[[" types one "[" */);
    await user.click(screen.getByRole('button', { name: 'Start run' }));

    await waitFor(() => expect(router.state.location.pathname).toBe('/runs/run-42'));
    const [start] = startRequests(sent);
    expect(start?.body).toEqual({ message: 'hello', amount: 250, urgent: true, channel: 'sms', tags: ['a'] });
    expect(start?.url.searchParams.has('dry_run')).toBe(false);
    expect(start?.headers.get('Idempotency-Key')).toMatch(/\S/);
  });

  it('sends the same attempt again under the same Idempotency-Key', async () => {
    let calls = 0;
    const { sent } = mockFetch(
      routes(NO_SCHEMA, [
        {
          method: 'POST',
          path: '/api/v1/workflows/orders-fetch/runs',
          respond: () => {
            calls += 1;
            return calls === 1
              ? json({ error: 'redis down', code: 'store_unavailable', status: 503 }, 503)
              : json({ run_id: 'run-8' });
          },
        },
      ]),
    );
    const { router } = renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/orders-fetch' });
    const user = userEvent.setup();

    await user.click(await screen.findByRole('button', { name: 'Start run' }));
    expect(await screen.findByRole('alert')).toHaveTextContent(/redis down/);
    await user.click(screen.getByRole('button', { name: 'Start run' }));

    await waitFor(() => expect(router.state.location.pathname).toBe('/runs/run-8'));
    const keys = startRequests(sent).map((r) => r.headers.get('Idempotency-Key'));
    expect(keys).toHaveLength(2);
    expect(keys[0]).toBe(keys[1]);
  });

  it('shows what the gateway refused', async () => {
    mockFetch(
      routes(NO_SCHEMA, [
        {
          method: 'POST',
          path: '/api/v1/workflows/orders-fetch/runs',
          status: 429,
          body: { error: 'too many open runs', code: 'RUN_NOT_RUNNABLE', status: 429 },
        },
      ]),
    );
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/orders-fetch' });
    const user = userEvent.setup();

    await user.click(await screen.findByRole('button', { name: 'Start run' }));

    expect(await screen.findByRole('alert')).toHaveTextContent(/too many open runs/);
  });

  it('asks for the whole input as JSON when the definition has no schema', async () => {
    const { sent } = mockFetch(
      routes(NO_SCHEMA, [
        { method: 'POST', path: '/api/v1/workflows/orders-fetch/runs', body: { run_id: 'run-7' } },
      ]),
    );
    const { router } = renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/orders-fetch' });
    const user = userEvent.setup();

    const input = await screen.findByRole('textbox', { name: 'Input (JSON)' });
    await user.clear(input);
    await user.type(input, '{{"order_id": "A-1001"}');
    await user.click(screen.getByRole('checkbox', { name: /dry run/i }));
    await user.click(screen.getByRole('button', { name: 'Start run' }));

    await waitFor(() => expect(router.state.location.pathname).toBe('/runs/run-7'));
    const [start] = startRequests(sent);
    expect(start?.body).toEqual({ order_id: 'A-1001' });
    expect(start?.url.searchParams.get('dry_run')).toBe('true');
  });

  it('refuses JSON that is not an object', async () => {
    const { sent } = mockFetch(routes(NO_SCHEMA));
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/orders-fetch' });
    const user = userEvent.setup();

    const input = await screen.findByRole('textbox', { name: 'Input (JSON)' });
    await user.clear(input);
    await user.type(input, '[[1]');
    await user.click(screen.getByRole('button', { name: 'Start run' }));

    expect(input).toHaveAccessibleDescription('Must be a JSON object.');
    expect(startRequests(sent)).toHaveLength(0);
  });

  it('shows an error when the definition cannot be read', async () => {
    mockFetch([]);
    renderPage(<WorkflowDetailPage />, { path: '/workflows/:id', url: '/workflows/missing' });

    expect(await screen.findByRole('alert')).toBeInTheDocument();
  });
});
