import { act, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { afterEach, describe, expect, it, vi } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { ApprovalDetailPage } from './ApprovalDetailPage';

const JOB = 'job-42';

const ME_ALLOWED = {
  principal_id: 'approver',
  tenant: 'default',
  role: 'admin',
  actions: { 'approvals.decide': { allowed: true } },
};

function fullContext(fields: object = {}) {
  return {
    approval: {
      job_id: JOB,
      state: 'APPROVAL_REQUIRED',
      decision: 'REQUIRE_APPROVAL',
      policy_rule_id: 'prod-writes',
      policy_reason: 'writes to production need a second person',
      approval_status: 'pending',
      approval_ref: JOB,
    },
    decision_summary: { source: 'policy_only', title: 'Approval required', subject: 'Review job.deploy', why: 'writes to production need a second person' },
    what_will_run: {
      topic: 'job.deploy',
      capability: 'deploy',
      principal: 'submitter',
      priority: 1,
      labels: { env: 'prod' },
      input_preview: '{"service":"billing"}',
      input_size_bytes: 21,
    },
    why_gated: { rule_id: 'prod-writes', reason: 'writes to production need a second person', decision: 'REQUIRE_APPROVAL', snapshot: 'snap-7' },
    policy_snapshot_summary: { matched_rule: { id: 'prod-writes', constraints_summary: 'max_retries=3' }, policy_version: 'snap-7' },
    blast_radius: { systems: ['billing-db'], namespaces: ['payments'], resources: ['invoices'], scope_description: 'Affects 1 system(s) in tenant default' },
    risk: { risk_tags: ['prod-write'], requires: ['change-ticket'], capability: 'deploy' },
    prior_approvals: [
      { job_id: 'job-41', topic: 'job.deploy', tenant: 'default', decision: 'APPROVED', resolved_by: 'alice', resolved_at: 1_767_261_600_000_000, was_approved: true },
    ],
    rollback_hint: 'redeploy the previous tag',
    rollback: { hint: 'redeploy the previous tag', compensation: { topic: 'job.deploy.undo', context_ptr: null } },
    time_remaining_ms: 125_000,
    time_left: { expires_at: '2030-01-01T00:00:00Z', remaining_ms: 125_000 },
    ...fields,
  };
}

const EMPTY_CONTEXT = {
  approval: { job_id: JOB, state: 'APPROVAL_REQUIRED', approval_status: 'pending' },
  what_will_run: {},
  why_gated: { rule_id: null, reason: null, snapshot: null, decision: null, constraints: null },
  blast_radius: { systems: [], namespaces: [], resources: [], scope_description: '' },
  risk: { risk_tags: [], requires: [], capability: '' },
  prior_approvals: [],
  rollback_hint: null,
  rollback: { hint: null, compensation: null },
  time_remaining_ms: null,
  time_left: { expires_at: null, remaining_ms: null },
};

function item(fields: object = {}) {
  return {
    job: { id: JOB, topic: 'job.deploy', state: 'APPROVAL_REQUIRED', tenant: 'default' },
    decision: 'PENDING',
    may_decide: true,
    may_not_decide_reason: null,
    ...fields,
  };
}

function routes(context: object, items: object[] = [item()], me: object = ME_ALLOWED, extra: FakeRoute[] = []): FakeRoute[] {
  return [
    { path: `/api/v1/approvals/${JOB}/context`, body: context },
    { path: '/api/v1/approvals', body: { items, next_cursor: null } },
    { path: '/api/v1/me', body: me },
    ...extra,
  ];
}

const open = () => renderPage(<ApprovalDetailPage />, { path: '/approvals/:id', url: `/approvals/${JOB}` });

const SECTIONS = ['What will run', 'Why it is gated', 'Blast radius', 'Risk', 'Prior decisions', 'Rollback guidance'];

function section(name: string) {
  return screen.getByRole('region', { name });
}

afterEach(() => {
  vi.useRealTimers();
});

describe('ApprovalDetailPage', () => {
  it('shows every section of the context under its own heading', async () => {
    mockFetch(routes(fullContext()));
    open();

    expect(await screen.findByRole('heading', { level: 2, name: 'What will run' })).toBeInTheDocument();
    expect(screen.getByRole('heading', { level: 1, name: `Approval for job ${JOB}` })).toBeInTheDocument();
    for (const name of SECTIONS) expect(screen.getByRole('heading', { level: 2, name })).toBeInTheDocument();

    expect(within(section('What will run')).getByText('job.deploy')).toBeInTheDocument();
    expect(within(section('What will run')).getByText(/"service": "billing"/)).toBeInTheDocument();
    expect(within(section('What will run')).getByRole('rowheader', { name: 'env' })).toBeInTheDocument();
    expect(within(section('Why it is gated')).getByText('prod-writes')).toBeInTheDocument();
    expect(within(section('Why it is gated')).getByText('writes to production need a second person')).toBeInTheDocument();
    expect(within(section('Why it is gated')).getByText('max_retries=3')).toBeInTheDocument();
    expect(within(section('Blast radius')).getByText('billing-db')).toBeInTheDocument();
    expect(within(section('Blast radius')).getByText('payments')).toBeInTheDocument();
    expect(within(section('Blast radius')).getByText('invoices')).toBeInTheDocument();
    expect(within(section('Risk')).getByText('prod-write')).toBeInTheDocument();
    expect(within(section('Risk')).getByText('change-ticket')).toBeInTheDocument();
    const prior = section('Prior decisions');
    expect(within(prior).getByRole('link', { name: 'job-41' })).toHaveAttribute('href', '/jobs/job-41');
    expect(within(prior).getByText('APPROVED')).toBeInTheDocument();
    expect(within(prior).getByText('alice')).toBeInTheDocument();
    expect(within(section('Rollback guidance')).getByText('redeploy the previous tag')).toBeInTheDocument();
    expect(within(section('Rollback guidance')).getByText('job.deploy.undo')).toBeInTheDocument();
    expect(screen.getByRole('timer', { name: 'Time left to decide' })).toBeInTheDocument();
    expect(screen.getByRole('button', { name: 'Approve' })).toBeEnabled();
  });

  it('says so in each section the context has nothing for', async () => {
    mockFetch(routes(EMPTY_CONTEXT));
    open();

    await screen.findByRole('heading', { level: 2, name: 'What will run' });
    expect(within(section('What will run')).getByText(/Nothing is recorded about what this job would run/)).toBeInTheDocument();
    expect(within(section('Why it is gated')).getByText(/No policy rule or reason is recorded/)).toBeInTheDocument();
    expect(within(section('Blast radius')).getByText(/names no system, namespace or resource/)).toBeInTheDocument();
    expect(within(section('Risk')).getByText(/No risk tags, requirements or capability/)).toBeInTheDocument();
    expect(within(section('Prior decisions')).getByText(/No earlier decision is recorded/)).toBeInTheDocument();
    expect(within(section('Rollback guidance')).getByText(/No rollback hint or compensation is recorded/)).toBeInTheDocument();
    expect(within(section('Time left')).getByText(/has no deadline/)).toBeInTheDocument();
    expect(screen.queryByRole('timer')).not.toBeInTheDocument();
  });

  it('counts down every second, for screen readers once a minute, and disables the decision at expiry', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'Date'] });
    vi.setSystemTime(new Date('2030-01-01T00:00:00Z'));
    mockFetch(routes(fullContext({ time_remaining_ms: 62_000, time_left: { expires_at: '2030-01-01T00:01:02Z', remaining_ms: 62_000 } })));
    open();

    const timer = await screen.findByRole('timer', { name: 'Time left to decide' });
    const visible = timer.querySelector('[aria-hidden="true"]')!;
    expect(visible).toHaveTextContent('1 min 02 s');
    expect(within(timer).getByText('About 1 minute left to decide.')).toBeInTheDocument();
    await waitFor(() => expect(screen.getByRole('button', { name: 'Approve' })).toBeEnabled());

    act(() => vi.advanceTimersByTime(1000));
    expect(visible).toHaveTextContent('1 min 01 s');
    act(() => vi.advanceTimersByTime(1000));
    expect(visible).toHaveTextContent('1 min 00 s');
    act(() => vi.advanceTimersByTime(1000));
    expect(visible).toHaveTextContent('59 s');
    expect(within(timer).getByText('Less than a minute left to decide.')).toBeInTheDocument();

    act(() => vi.advanceTimersByTime(59_000));
    expect(timer).toHaveTextContent('Expired');
    expect(within(timer).getByText('The approval has expired.')).toBeInTheDocument();
    const approve = screen.getByRole('button', { name: 'Approve' });
    expect(approve).toBeDisabled();
    expect(screen.getByRole('button', { name: 'Reject' })).toBeDisabled();
    expect(approve).toHaveAccessibleDescription(/has expired/);
  });

  it('shows why the submitter may not decide its own job', async () => {
    const why = 'self_approval_denied: the signed-in key submitted this job; another identity must decide';
    mockFetch(routes(fullContext(), [item({ may_decide: false, may_not_decide_reason: why })]));
    open();

    await screen.findByRole('heading', { level: 2, name: 'Decision' });
    await waitFor(() => expect(screen.getByRole('button', { name: 'Approve' })).toHaveAccessibleDescription(new RegExp(why)));
    expect(screen.getByRole('button', { name: 'Approve' })).toBeDisabled();
    expect(screen.getByRole('button', { name: 'Reject' })).toBeDisabled();
    expect(screen.getByText(why)).toBeInTheDocument();
  });

  it('disables the decision when the key may not decide approvals at all', async () => {
    const me = { ...ME_ALLOWED, role: 'viewer', actions: { 'approvals.decide': { allowed: false, reason: 'Deciding approvals takes role admin.' } } };
    mockFetch(routes(fullContext(), [item()], me));
    open();

    await screen.findByRole('heading', { level: 2, name: 'Decision' });
    await waitFor(() => expect(screen.getByText('Deciding approvals takes role admin.')).toBeInTheDocument());
    expect(screen.getByRole('button', { name: 'Approve' })).toBeDisabled();
    expect(screen.getByRole('button', { name: 'Approve' })).toHaveAccessibleDescription(/takes role admin/);
  });

  it('approves with the reason given', async () => {
    const { sent } = mockFetch(
      routes(fullContext(), [item()], ME_ALLOWED, [
        { method: 'POST', path: `/api/v1/approvals/${JOB}/approve`, body: { job_id: JOB, status: 'approved' } },
      ]),
    );
    open();
    const user = userEvent.setup();
    await waitFor(() => expect(screen.getByRole('button', { name: 'Approve' })).toBeEnabled());

    await user.type(screen.getByRole('textbox', { name: 'Reason' }), 'checked the change ticket');
    await user.click(screen.getByRole('button', { name: 'Approve' }));

    await waitFor(() => expect(sent.some((r) => r.method === 'POST')).toBe(true));
    const post = sent.find((r) => r.method === 'POST')!;
    expect(post.url.pathname).toBe(`/api/v1/approvals/${JOB}/approve`);
    expect(post.body).toEqual({ reason: 'checked the change ticket' });
    expect(await screen.findByText(`Approved job ${JOB}.`)).toBeInTheDocument();
  });

  it('says when the approval was already decided', async () => {
    mockFetch(
      routes(
        fullContext({ approval: { job_id: JOB, state: 'SUCCEEDED', approval_status: 'approved', resolved_by: 'alice', resolution: 'fine' } }),
        [],
      ),
    );
    open();
    await waitFor(() => expect(screen.getByText(/already approved by alice/)).toBeInTheDocument());
    expect(screen.getByRole('button', { name: 'Approve' })).toBeDisabled();
  });

  it('shows an error when the context cannot be read', async () => {
    mockFetch([
      { path: `/api/v1/approvals/${JOB}/context`, status: 404, body: { error: 'job not found', code: 'not_found', status: 404 } },
      { path: '/api/v1/approvals', body: { items: [], next_cursor: null } },
      { path: '/api/v1/me', body: ME_ALLOWED },
    ]);
    open();
    expect(await screen.findByRole('alert')).toHaveTextContent('job not found');
  });
});
