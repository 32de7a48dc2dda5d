import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { beforeEach, describe, expect, it, vi } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import type { Definition, RunDetail, TimelineEvent } from '../types';

import { RunDetailPage } from './RunDetailPage';

const RUN_ID = '864dd991-5c02-4de0-82a1-2973c0b40a48';

const DEFINITION: Definition = {
  id: 'example-approval',
  name: 'Echo with approval',
  steps: {
    needs_approval: { id: 'needs_approval', type: 'condition', name: 'Large amount?' },
    approve: { id: 'approve', type: 'approval', depends_on: ['needs_approval'] },
    wait: { id: 'wait', type: 'delay', depends_on: ['approve'] },
    echo: { id: 'echo', type: 'worker', topic: 'job.echo', depends_on: ['wait'] },
  },
};

const WAITING_RUN: RunDetail = {
  id: RUN_ID,
  workflow_id: 'example-approval',
  status: 'waiting',
  started_at: '2026-11-26T08:00:00.000000Z',
  updated_at: '2026-11-26T08:00:01.000000Z',
  completed_at: null,
  input: { amount: 250, message: 'hello' },
  steps: {
    needs_approval: { step_id: 'needs_approval', status: 'succeeded', attempts: 1, output: true },
    approve: { step_id: 'approve', status: 'waiting', attempts: 1, job_id: `${RUN_ID}:approve@1` },
  },
  timers: [],
};

const SUCCEEDED_RUN: RunDetail = {
  ...WAITING_RUN,
  status: 'succeeded',
  completed_at: '2026-11-26T08:00:09.000000Z',
  steps: {
    needs_approval: { status: 'succeeded', attempts: 1 },
    approve: { status: 'succeeded', attempts: 1 },
    wait: { status: 'succeeded', attempts: 1 },
    echo: { status: 'succeeded', attempts: 1, output: { echo: 'hello' } },
  },
  output: { echo: { echo: 'hello' } },
};

const TIMELINE: TimelineEvent[] = [
  { timestamp: '2026-11-26T08:00:00.100000Z', type: 'run_status', status: 'running' },
  { timestamp: '2026-11-26T08:00:00.200000Z', type: 'step_completed', step_id: 'needs_approval', status: 'succeeded' },
  {
    timestamp: '2026-11-26T08:00:00.300000Z',
    type: 'step_waiting',
    step_id: 'approve',
    status: 'waiting',
    message: 'waiting for approval',
  },
];

function routes(run: RunDetail, extra: FakeRoute[] = []): FakeRoute[] {
  return [
    ...extra,
    { path: `/api/v1/workflow-runs/${RUN_ID}`, body: run },
    { path: `/api/v1/workflow-runs/${RUN_ID}/timeline`, body: TIMELINE },
    { path: '/api/v1/workflows/example-approval', body: DEFINITION },
  ];
}

function renderRun() {
  return renderPage(<RunDetailPage />, { path: '/runs/:id', url: `/runs/${RUN_ID}` });
}

// React Flow measures its nodes with a ResizeObserver, which jsdom lacks.
class NoopResizeObserver {
  observe() {}
  unobserve() {}
  disconnect() {}
}

beforeEach(() => {
  vi.stubGlobal('ResizeObserver', NoopResizeObserver);
});

describe('RunDetailPage', () => {
  it('shows the run id, its status and each step with its status word', async () => {
    mockFetch(routes(WAITING_RUN));
    renderRun();

    expect(await screen.findByRole('heading', { level: 1, name: new RegExp(RUN_ID) })).toBeInTheDocument();
    const approve = await screen.findByTestId('step-approve');
    expect(approve).toHaveAttribute('data-status', 'waiting');
    expect(within(approve).getByText('waiting')).toBeInTheDocument();
    expect(within(approve).getByText('approve')).toBeInTheDocument();

    const check = screen.getByTestId('step-needs_approval');
    expect(check).toHaveAttribute('data-status', 'succeeded');
    expect(within(check).getByText('succeeded')).toBeInTheDocument();
    expect(screen.getByTestId('step-echo')).toHaveAttribute('data-status', 'pending');
    expect(within(screen.getByTestId('step-echo')).getByText('pending')).toBeInTheDocument();
  });

  it('says plainly that a step waits for approval, and links to the approvals', async () => {
    mockFetch(routes(WAITING_RUN));
    renderRun();

    const notice = await screen.findByRole('region', { name: 'Waiting for approval' });
    expect(within(notice).getByText(/is waiting for approval/)).toHaveTextContent(
      `Step approve is waiting for approval (gate job ${RUN_ID}:approve@1).`,
    );
    expect(within(notice).getByRole('link', { name: 'Review pending approvals' })).toHaveAttribute('href', '/approvals');
    expect(within(await screen.findByTestId('step-approve')).getByText('Waiting for approval')).toBeInTheDocument();
  });

  it('lists the timeline, oldest first', async () => {
    mockFetch(routes(WAITING_RUN));
    renderRun();

    const timeline = await screen.findByRole('region', { name: 'Timeline' });
    const rows = await within(timeline).findAllByRole('row');
    expect(rows.slice(1).map((r) => within(r).getAllByRole('cell')[1]?.textContent)).toEqual([
      'run status',
      'step completed',
      'step waiting',
    ]);
  });

  it('offers "Cancel run" while the run is open and cancels it once confirmed', async () => {
    const { sent } = mockFetch(
      routes(WAITING_RUN, [
        { method: 'POST', path: `/api/v1/workflows/example-approval/runs/${RUN_ID}/cancel`, status: 204 },
      ]),
    );
    renderRun();
    const user = userEvent.setup();

    await user.click(await screen.findByRole('button', { name: 'Cancel run' }));
    expect(sent.some((r) => r.url.pathname.endsWith('/cancel'))).toBe(false);
    await user.click(screen.getByRole('button', { name: 'Yes, cancel run' }));

    await waitFor(() =>
      expect(sent.some((r) => r.method === 'POST' && r.url.pathname.endsWith('/cancel'))).toBe(true),
    );
    const cancel = sent.find((r) => r.url.pathname.endsWith('/cancel'));
    expect(cancel?.url.pathname).toBe(`/api/v1/workflows/example-approval/runs/${RUN_ID}/cancel`);
  });

  it('hides "Cancel run" once the run is terminal', async () => {
    mockFetch(routes(SUCCEEDED_RUN));
    renderRun();

    expect(await screen.findByTestId('step-echo')).toHaveAttribute('data-status', 'succeeded');
    expect(screen.queryByRole('button', { name: 'Cancel run' })).not.toBeInTheDocument();
    expect(screen.queryByRole('region', { name: 'Waiting for approval' })).not.toBeInTheDocument();
  });

  it('reruns from the chosen step and opens the new run', async () => {
    const { sent } = mockFetch(
      routes(SUCCEEDED_RUN, [
        { method: 'POST', path: `/api/v1/workflow-runs/${RUN_ID}/rerun`, body: { run_id: 'rerun-1' } },
      ]),
    );
    const { router } = renderRun();
    const user = userEvent.setup();

    const select = await screen.findByRole('combobox', { name: 'Rerun from step' });
    await waitFor(() => expect(within(select).getByRole('option', { name: 'wait' })).toBeInTheDocument());
    await user.selectOptions(select, 'wait');
    await user.click(screen.getByRole('button', { name: 'Rerun' }));

    await waitFor(() => expect(router.state.location.pathname).toBe('/runs/rerun-1'));
    const rerun = sent.find((r) => r.method === 'POST' && r.url.pathname.endsWith('/rerun'));
    expect(rerun?.body).toEqual({ from_step: 'wait' });
  });

  it('refreshes the run and its timeline when the run is invalidated, as a live event does', async () => {
    const table = routes(WAITING_RUN);
    const { sent } = mockFetch(table);
    const { queryClient } = renderRun();
    expect(await screen.findByTestId('step-approve')).toHaveAttribute('data-status', 'waiting');
    await screen.findByText('step waiting');

    const runRoute = table.find((r) => r.path === `/api/v1/workflow-runs/${RUN_ID}`);
    const timelineRoute = table.find((r) => r.path === `/api/v1/workflow-runs/${RUN_ID}/timeline`);
    if (!runRoute || !timelineRoute) throw new Error('routes missing');
    runRoute.body = { ...WAITING_RUN, status: 'running', updated_at: '2026-11-26T08:00:05.000000Z', steps: { ...WAITING_RUN.steps, approve: { status: 'succeeded' } } };
    timelineRoute.body = [...TIMELINE, { timestamp: '2026-11-26T08:00:05Z', type: 'step_approved', step_id: 'approve' }];
    await queryClient.invalidateQueries({ queryKey: ['run', RUN_ID] });

    await waitFor(() => expect(screen.getByTestId('step-approve')).toHaveAttribute('data-status', 'succeeded'));
    expect(await screen.findByText('step approved')).toBeInTheDocument();
    expect(screen.queryByRole('region', { name: 'Waiting for approval' })).not.toBeInTheDocument();
    const timelineFetches = sent.filter((r) => r.url.pathname.endsWith('/timeline'));
    expect(timelineFetches.length).toBeGreaterThanOrEqual(2);
  });

  it('shows the for_each items of a step', async () => {
    const run: RunDetail = {
      ...WAITING_RUN,
      status: 'running',
      steps: {
        ...WAITING_RUN.steps,
        approve: {
          status: 'running',
          resolved_items: ['a', 'b'],
          children: {
            'approve[1]': { status: 'running', attempts: 1, job_id: `${RUN_ID}:approve[1]@1` },
            'approve[0]': { status: 'succeeded', attempts: 1, job_id: `${RUN_ID}:approve[0]@1` },
          },
        },
      },
    };
    mockFetch(routes(run));
    renderRun();

    const items = await screen.findByRole('region', { name: 'approve: 2 items' });
    const rows = within(items).getAllByRole('row').slice(1);
    expect(rows.map((r) => within(r).getAllByRole('cell')[0]?.textContent)).toEqual(['approve[0]', 'approve[1]']);
    expect(within(screen.getByTestId('child-approve[0]')).getByText('succeeded')).toBeInTheDocument();
    expect(within(screen.getByTestId('child-approve[1]')).getByText('running')).toBeInTheDocument();
    expect(screen.getByTestId('child-approve[1]')).toHaveAttribute('data-status', 'running');
    expect(within(await screen.findByTestId('step-approve')).getByText('2 items: 1 succeeded, 1 running')).toBeInTheDocument();
  });

  it('draws the steps without links when the definition is gone', async () => {
    mockFetch([
      { path: `/api/v1/workflow-runs/${RUN_ID}`, body: WAITING_RUN },
      { path: `/api/v1/workflow-runs/${RUN_ID}/timeline`, body: [] },
    ]);
    renderRun();

    expect(await screen.findByText(/definition could not be loaded/)).toBeInTheDocument();
    expect(await screen.findByTestId('step-approve')).toHaveAttribute('data-status', 'waiting');
    expect(screen.queryByTestId('step-echo')).not.toBeInTheDocument();
  });

  it('shows an error when the run cannot be read', async () => {
    mockFetch([]);
    renderRun();

    expect(await screen.findByRole('alert')).toBeInTheDocument();
  });
});
