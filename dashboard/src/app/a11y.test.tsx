/**
 * An axe scan of each page as the app renders it, with answers for every list. jsdom
 * has no layout, so colour contrast is left to the browser tests; the structure
 * (names, labels, roles, landmarks, headings, tables) is checked here.
 */

import { QueryClientProvider } from '@tanstack/react-query';
import { render, screen } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import axe from 'axe-core';
import { createMemoryRouter, RouterProvider } from 'react-router';
import { describe, expect, it } from 'vitest';

import { SESSION_STORAGE_KEY, SessionProvider } from '@/lib/session';
import { mockFetch, testQueryClient, type FakeRoute } from '@/testing';

import { routes } from './routes';

const JOB = {
  id: 'job-1',
  state: 'SUCCEEDED',
  topic: 'job.echo',
  tenant: 'default',
  created_at: '2026-01-01T10:00:00Z',
  updated_at: '2026-01-01T10:00:02Z',
  completed_at: '2026-01-01T10:00:02Z',
  prompt: 'hello',
  labels: { team: 'ops' },
  result: { echo: 'hello' },
};

const API: FakeRoute[] = [
  {
    path: '/api/v1/status',
    body: {
      redis: { connected: true },
      nats: { connected: true },
      workers: 1,
      uptime_seconds: 60,
      circuit_breakers: { input: { state: 'CLOSED', failures: 0, fail_threshold: 5 } },
    },
  },
  { path: '/api/v1/jobs', body: { items: [JOB], next_cursor: 'c2' } },
  { path: '/api/v1/jobs/job-1', body: JOB },
  {
    path: '/api/v1/jobs/job-1/decisions',
    body: [{ action: 'ALLOW', rule_id: 'r1', reason: 'fine', evaluated_at: '2026-01-01T10:00:01Z', constraints: { max: 1 } }],
  },
  {
    path: '/api/v1/approvals',
    body: {
      items: [
        {
          job: { id: 'gate-1', topic: 'job.cordum.approval-gate', state: 'APPROVAL_REQUIRED' },
          policy_rule_id: 'big',
          policy_reason: 'amount',
          safety_decision: 'REQUIRE_APPROVAL',
          workflow: { run_id: 'run-1', workflow_id: 'wf', step_id: 'approve' },
          may_decide: false,
          may_not_decide_reason: 'self_approval_denied: the signed-in key submitted this job',
        },
        { job: { id: 'gate-2', topic: 'job.x', state: 'APPROVAL_REQUIRED' }, may_decide: true },
      ],
      next_cursor: null,
    },
  },
  { path: '/api/v1/approvals/gate-2/context', body: { kind: 'workflow_approval_context', decision: { a: 1 } } },
  {
    path: '/api/v1/dlq/page',
    body: { items: [{ job_id: 'dead-1', topic: 'job.echo', error: 'crashed', original_state: 'FAILED', retry_count: 1 }], next_cursor: null },
  },
  {
    path: '/api/v1/workers',
    body: { items: [{ worker_id: 'w1', pool: 'echo', active_jobs: 1, max_parallel_jobs: 2, online: true, last_heartbeat: '2026-01-01T10:00:00Z', heartbeat_age_seconds: 2 }] },
  },
];

async function scan() {
  const results = await axe.run(document.body, {
    rules: { 'color-contrast': { enabled: false } },
    resultTypes: ['violations'],
  });
  return results.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.nodes.map((n) => n.html).join(' | ')}`);
}

function open(url: string, signedIn = true) {
  document.documentElement.lang = 'en';
  if (signedIn) window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify({ apiKey: 'k', tenant: 'default' }));
  mockFetch(API);
  const router = createMemoryRouter(routes, { initialEntries: [url] });
  render(
    <QueryClientProvider client={testQueryClient()}>
      <SessionProvider>
        <RouterProvider router={router} />
      </SessionProvider>
    </QueryClientProvider>,
  );
}

describe('accessibility (axe, serious and critical)', () => {
  it('sign-in page, also with an error shown', async () => {
    open('/sign-in', false);
    await userEvent.setup().click(await screen.findByRole('button', { name: 'Sign in' }));
    expect(await scan()).toEqual([]);
  });

  it.each([
    ['/', 'Jobs by state', 'SUCCEEDED'],
    ['/jobs', 'Jobs', 'job-1'],
    ['/jobs/job-1', 'Output', 'fine'],
    ['/approvals', 'Approvals', 'gate-2'],
    ['/dlq', 'DLQ', 'crashed'],
    ['/workers', 'Workers', 'w1'],
  ])('%s', async (url, _what, text) => {
    open(url);
    await screen.findAllByText(text, { exact: false });
    expect(await scan()).toEqual([]);
  });

  it('the approvals page with the context open and a confirm dialog elsewhere', async () => {
    open('/approvals');
    const user = userEvent.setup();
    const buttons = await screen.findAllByRole('button', { name: 'Show context' });
    await user.click(buttons[1]);
    await screen.findByText(/"a": 1/);
    expect(await scan()).toEqual([]);
  });

  it('the DLQ with its delete confirmation open', async () => {
    open('/dlq');
    const user = userEvent.setup();
    await user.click(await screen.findByRole('button', { name: 'Delete' }));
    await screen.findByRole('alertdialog');
    expect(await scan()).toEqual([]);
  });
});
