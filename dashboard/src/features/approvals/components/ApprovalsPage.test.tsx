import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { ApprovalsPage } from './ApprovalsPage';

const GATE = 'run-1:approve@1';

function item(id: string, fields: object = {}) {
  return {
    job: { id, topic: 'job.cordum.approval-gate', state: 'APPROVAL_REQUIRED', tenant: 'default' },
    decision: 'PENDING',
    approval_required: true,
    policy_rule_id: 'payments-over-100',
    policy_reason: 'amount is 100 or more',
    safety_decision: 'REQUIRE_APPROVAL',
    requested_at: '2026-01-01T10:00:00Z',
    ...fields,
  };
}

function routes(items: object[], extra: FakeRoute[] = []): FakeRoute[] {
  return [{ path: '/api/v1/approvals', body: { items, next_cursor: null } }, ...extra];
}

const open = () => renderPage(<ApprovalsPage />, { path: '/approvals' });

describe('ApprovalsPage', () => {
  it('shows what each item is, why it is gated and the workflow it belongs to', async () => {
    mockFetch(routes([item(GATE, { workflow: { run_id: 'run-1', workflow_id: 'example-approval', step_id: 'approve' } })]));
    open();

    const card = await screen.findByRole('article', { name: new RegExp(GATE.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')) });
    expect(within(card).getByText('job.cordum.approval-gate')).toBeInTheDocument();
    expect(within(card).getByRole('link', { name: GATE })).toHaveAttribute('href', `/jobs/${encodeURIComponent(GATE)}`);
    expect(within(card).getByText('payments-over-100')).toBeInTheDocument();
    expect(within(card).getByText('amount is 100 or more')).toBeInTheDocument();
    expect(within(card).getByText('REQUIRE_APPROVAL')).toBeInTheDocument();
    expect(within(card).getByRole('link', { name: 'Run run-1' })).toHaveAttribute('href', '/runs/run-1');
    expect(within(card).getByRole('link', { name: 'Open approval page' })).toHaveAttribute(
      'href',
      `/approvals/${encodeURIComponent(GATE)}`,
    );
  });

  it('approves with the reason given', async () => {
    const { sent } = mockFetch(
      routes([item('job-1')], [{ method: 'POST', path: '/api/v1/approvals/job-1/approve', body: { job_id: 'job-1', status: 'approved' } }]),
    );
    open();
    const user = userEvent.setup();
    const card = await screen.findByRole('article', { name: /job-1/ });

    await user.type(within(card).getByRole('textbox', { name: 'Reason' }), 'looks right');
    await user.click(within(card).getByRole('button', { name: 'Approve' }));

    await waitFor(() => expect(sent.some((r) => r.method === 'POST')).toBe(true));
    const post = sent.find((r) => r.method === 'POST')!;
    expect(post.url.pathname).toBe('/api/v1/approvals/job-1/approve');
    expect(post.body).toEqual({ reason: 'looks right' });
    expect(await screen.findByText('Approved job job-1.')).toBeInTheDocument();
  });

  it('rejects, and asks for a reason first', async () => {
    const { sent } = mockFetch(routes([item('job-2')], [{ method: 'POST', path: '/api/v1/approvals/job-2/reject', body: {} }]));
    open();
    const user = userEvent.setup();
    const card = await screen.findByRole('article', { name: /job-2/ });

    await user.click(within(card).getByRole('button', { name: 'Reject' }));
    expect(within(card).getByRole('alert')).toHaveTextContent('Give a reason');
    expect(sent.some((r) => r.method === 'POST')).toBe(false);

    await user.type(within(card).getByRole('textbox', { name: 'Reason' }), 'too risky');
    await user.click(within(card).getByRole('button', { name: 'Reject' }));
    await waitFor(() => expect(sent.find((r) => r.method === 'POST')?.url.pathname).toBe('/api/v1/approvals/job-2/reject'));
  });

  it('disables the decision and says why when the key may not decide', async () => {
    const why = 'self_approval_denied: the signed-in key submitted this job; another identity must decide';
    mockFetch(routes([item('job-3', { may_decide: false, may_not_decide_reason: why })]));
    open();
    const card = await screen.findByRole('article', { name: /job-3/ });

    const approve = within(card).getByRole('button', { name: 'Approve' });
    const reject = within(card).getByRole('button', { name: 'Reject' });
    expect(approve).toBeDisabled();
    expect(reject).toBeDisabled();
    expect(within(card).getByText(why)).toBeInTheDocument();
    expect(approve).toHaveAccessibleDescription(why);
  });

  it('lets the key decide when the item does not say (an older gateway)', async () => {
    mockFetch(routes([item('job-4')]));
    open();
    const card = await screen.findByRole('article', { name: /job-4/ });
    expect(within(card).getByRole('button', { name: 'Approve' })).toBeEnabled();
  });

  it('explains a 403 self_approval_denied from the server', async () => {
    mockFetch(
      routes([item('job-5', { may_decide: true })], [
        {
          method: 'POST',
          path: '/api/v1/approvals/job-5/approve',
          status: 403,
          body: { error: 'self approval denied', code: 'self_approval_denied', status: 403 },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    const card = await screen.findByRole('article', { name: /job-5/ });
    await user.type(within(card).getByRole('textbox', { name: 'Reason' }), 'ok');
    await user.click(within(card).getByRole('button', { name: 'Approve' }));

    expect(await within(card).findByRole('alert')).toHaveTextContent('the signed-in key submitted this job');
  });

  it('loads the context on demand', async () => {
    const { sent } = mockFetch(
      routes([item('job-6')], [
        { path: '/api/v1/approvals/job-6/context', body: { kind: 'workflow_approval_context', decision: { amount: 250 } } },
      ]),
    );
    open();
    const user = userEvent.setup();
    const card = await screen.findByRole('article', { name: /job-6/ });
    expect(sent.some((r) => r.url.pathname.endsWith('/context'))).toBe(false);

    await user.click(within(card).getByRole('button', { name: 'Show context' }));
    expect(await within(card).findByText(/"amount": 250/)).toBeInTheDocument();
  });

  it('says when nothing waits, and when the inbox cannot be read', async () => {
    mockFetch(routes([]));
    const first = open();
    expect(await screen.findByText('No approvals waiting')).toBeInTheDocument();
    first.unmount();

    mockFetch([{ path: '/api/v1/approvals', status: 403, body: { error: 'forbidden', code: 'forbidden', status: 403 } }]);
    open();
    expect(await screen.findByRole('alert')).toHaveTextContent('forbidden');
  });
});
