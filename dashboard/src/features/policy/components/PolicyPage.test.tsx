import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { me, meRoute, NO_CHANGE_REASON, READ_ONLY, SHA, wrote } from './fixtures';
import { PolicyPage } from './PolicyPage';

const BUNDLES = [
  {
    id: 'secops/deny-prod',
    enabled: true,
    source: 'secops',
    author: 'local-policy-owner',
    updated_at: '2026-11-27T02:40:00Z',
    rule_count: 2,
    sha256: SHA,
  },
  { id: 'try-me', enabled: false, source: 'core', author: 'bob', updated_at: '2026-11-27T03:00:00Z', rule_count: 1, sha256: 'b'.repeat(64) },
];

const SNAPSHOTS = [
  { id: '2026-11-27T02:41:00Z-6f7a8b9c0d', created_at: '2026-11-27T02:41:00Z', author: 'owner', note: 'after', bundle_ids: ['secops/deny-prod'] },
  { id: '2026-11-27T02:40:00Z-1a2b3c4d5e', created_at: '2026-11-27T02:40:00Z', author: 'owner', note: 'before', bundle_ids: [] },
];

const PROPOSALS = [
  { id: 'prop-own', action: 'publish', bundle_ids: ['try-me'], proposed_by: 'alice', proposed_at: '2026-11-27T03:00:00Z', expires_at: '2026-11-28T03:00:00Z', state: 'pending' },
  { id: 'prop-other', action: 'rollback', snapshot_id: SNAPSHOTS[1].id, proposed_by: 'bob', proposed_at: '2026-11-27T03:01:00Z', expires_at: '2026-11-28T03:01:00Z', state: 'pending' },
];

const AUDIT = [
  { id: 'a1', action: 'publish', actor_id: 'local-policy-owner', bundle_id: 'secops/deny-prod', snapshot_after: SNAPSHOTS[0].id, created_at: '2026-11-27T02:41:00Z', message: 'reviewed' },
];

function routes(extra: FakeRoute[] = [], who: unknown = me(), proposals: object[] = []): FakeRoute[] {
  return [
    ...extra,
    meRoute(who),
    { path: '/api/v1/policy/bundles', body: { items: BUNDLES, bundles: BUNDLES } },
    { path: '/api/v1/policy/bundles/snapshots', body: { items: SNAPSHOTS } },
    { path: '/api/v1/policy/proposals', body: { items: proposals } },
    { path: /^\/api\/v1\/policy\/audit/, body: AUDIT },
  ];
}

const open = () => renderPage(<PolicyPage />, { path: '/policy' });

async function snapshotRow(id: string) {
  return (await screen.findByRole('rowheader', { name: id })).closest('tr') as HTMLElement;
}

describe('PolicyPage', () => {
  it('lists the bundles with their state, source, author, rule count and sha', async () => {
    mockFetch(routes());
    open();
    const link = await screen.findByRole('link', { name: 'secops/deny-prod' });
    expect(link).toHaveAttribute('href', '/policy/bundles/secops~deny-prod');
    const live = link.closest('tr') as HTMLElement;
    expect(within(live).getByText('in force')).toBeInTheDocument();
    expect(within(live).getByText('secops')).toBeInTheDocument();
    expect(within(live).getByText('local-policy-owner')).toBeInTheDocument();
    expect(within(live).getByText('2')).toBeInTheDocument();
    expect(within(live).getByText(SHA.slice(0, 12))).toBeInTheDocument();
    const draft = screen.getByRole('link', { name: 'try-me' }).closest('tr') as HTMLElement;
    expect(within(draft).getByText('draft')).toBeInTheDocument();
    // The history and the audit are shown too.
    expect(await snapshotRow(SNAPSHOTS[1].id)).toBeInTheDocument();
    expect(await screen.findByText('reviewed')).toBeInTheDocument();
  });

  it('says so when there are no bundles', async () => {
    mockFetch([meRoute(), { path: '/api/v1/policy/bundles', body: { items: [] } }]);
    open();
    expect(await screen.findByText('No bundles')).toBeInTheDocument();
  });

  it('shows a failed read with a way to try again', async () => {
    mockFetch([meRoute(), { path: '/api/v1/policy/bundles', status: 503, body: { error: 'redis down', code: 'unavailable' } }]);
    open();
    expect(await screen.findByText(/redis down/)).toBeInTheDocument();
  });

  it('rolls back to a snapshot only after confirming', async () => {
    const { sent } = mockFetch(
      routes([
        {
          method: 'POST',
          path: '/api/v1/policy/rollback',
          body: { snapshot_before: 'snap-x', snapshot_after: 'snap-y', rollback_to: SNAPSHOTS[1].id, id: 'snap-y' },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    const row = await snapshotRow(SNAPSHOTS[1].id);
    await user.click(within(row).getByRole('button', { name: 'Roll back to this snapshot' }));
    expect(wrote(sent)).toBe(false);
    await user.click(within(screen.getByRole('alertdialog')).getByRole('button', { name: 'Yes, roll back' }));

    await waitFor(() => expect(sent.find((r) => r.method === 'POST')?.body).toEqual({ snapshot_id: SNAPSHOTS[1].id }));
    expect(await screen.findByText(/Rolled back to snapshot 2026-11-27T02:40:00Z-1a2b3c4d5e/)).toBeInTheDocument();
  });

  it('shows a rollback kept for a second person as the pending proposal', async () => {
    mockFetch(
      routes([
        {
          method: 'POST',
          path: '/api/v1/policy/rollback',
          status: 202,
          body: { status: 'pending_confirmation', proposal: { id: 'prop-9', action: 'rollback', snapshot_id: SNAPSHOTS[1].id, proposed_by: 'alice' } },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    const row = await snapshotRow(SNAPSHOTS[1].id);
    await user.click(within(row).getByRole('button', { name: 'Roll back to this snapshot' }));
    await user.click(within(screen.getByRole('alertdialog')).getByRole('button', { name: 'Yes, roll back' }));

    expect(await screen.findByText('Waiting for a second person.')).toBeInTheDocument();
    expect(screen.getByText('prop-9')).toBeInTheDocument();
    expect(screen.getAllByText(`Roll back to snapshot ${SNAPSHOTS[1].id}`).length).toBeGreaterThan(0);
  });

  it('lets another identity confirm a proposal, and not its author', async () => {
    const { sent } = mockFetch(
      routes([{ method: 'POST', path: '/api/v1/policy/proposals/prop-other/confirm', body: { proposal_id: 'prop-other' } }], me(), PROPOSALS),
    );
    open();
    const user = userEvent.setup();
    const own = (await screen.findByRole('rowheader', { name: 'prop-own' })).closest('tr') as HTMLElement;
    const confirmOwn = within(own).getByRole('button', { name: 'Confirm' });
    expect(confirmOwn).toBeDisabled();
    expect(confirmOwn).toHaveAccessibleDescription(/You proposed this change: another identity must confirm it/);
    // The author may still withdraw it.
    expect(within(own).getByRole('button', { name: 'Reject' })).toBeEnabled();

    const other = screen.getByRole('rowheader', { name: 'prop-other' }).closest('tr') as HTMLElement;
    await user.click(within(other).getByRole('button', { name: 'Confirm' }));
    await waitFor(() => expect(sent.some((r) => r.method === 'POST' && r.url.pathname === '/api/v1/policy/proposals/prop-other/confirm')).toBe(true));
    expect(await screen.findByText(/Confirmed proposal prop-other/)).toBeInTheDocument();
  });

  it('rejects a proposal after confirming', async () => {
    const { sent } = mockFetch(
      routes([{ method: 'POST', path: '/api/v1/policy/proposals/prop-own/reject', body: { id: 'prop-own', state: 'rejected' } }], me(), PROPOSALS),
    );
    open();
    const user = userEvent.setup();
    const own = (await screen.findByRole('rowheader', { name: 'prop-own' })).closest('tr') as HTMLElement;
    await user.click(within(own).getByRole('button', { name: 'Reject' }));
    await user.click(within(screen.getByRole('alertdialog')).getByRole('button', { name: 'Yes, reject' }));
    await waitFor(() => expect(sent.some((r) => r.url.pathname === '/api/v1/policy/proposals/prop-own/reject')).toBe(true));
  });

  it('creates a new draft with enabled false and opens it', async () => {
    const { sent } = mockFetch(
      routes([{ method: 'PUT', path: '/api/v1/policy/bundles/secops~new-one', body: { id: 'secops/new-one', enabled: false } }]),
    );
    open();
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Bundle id'), 'secops/new-one');
    const editor = screen.getByLabelText('Draft YAML');
    fireEvent.change(editor, { target: { value: 'rules: []' } });
    await user.click(screen.getByRole('button', { name: 'Create draft' }));

    await waitFor(() => expect(sent.find((r) => r.method === 'PUT')?.body).toEqual({ content: 'rules: []', enabled: false }));
    await waitFor(() => expect(screen.getByTestId('location')).toHaveTextContent('/policy/bundles/secops~new-one'));
  });

  it('marks the line a refused new draft is wrong at', async () => {
    mockFetch(
      routes([
        {
          method: 'PUT',
          path: '/api/v1/policy/bundles/bad',
          status: 400,
          body: { error: "invalid policy bundle: line 4, rule 'x': rules[0].decision: not one of allow, deny", code: 'POLICY_VALIDATION_FAILED' },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    await user.type(await screen.findByLabelText('Bundle id'), 'bad');
    await user.click(screen.getByRole('button', { name: 'Create draft' }));
    expect(await screen.findByRole('button', { name: 'Go to line 4' })).toBeInTheDocument();
    expect(screen.getByLabelText('Draft YAML')).toHaveAttribute('aria-invalid', 'true');
    expect(screen.getByTestId('location')).toHaveTextContent(/^\/policy$/);
  });

  it('shows every write as unavailable, with the reason, to a key that may not change the policy', async () => {
    const { sent } = mockFetch(routes([], READ_ONLY, PROPOSALS));
    open();
    const user = userEvent.setup();
    const create = await screen.findByRole('button', { name: 'Create draft' });
    expect(create).toBeDisabled();
    expect(create).toHaveAccessibleDescription(NO_CHANGE_REASON);
    const row = await snapshotRow(SNAPSHOTS[0].id);
    const rollback = within(row).getByRole('button', { name: 'Roll back to this snapshot' });
    expect(rollback).toBeDisabled();
    expect(rollback).toHaveAccessibleDescription(NO_CHANGE_REASON);
    const other = (await screen.findByRole('rowheader', { name: 'prop-other' })).closest('tr') as HTMLElement;
    expect(within(other).getByRole('button', { name: 'Confirm' })).toHaveAccessibleDescription(NO_CHANGE_REASON);
    expect(within(other).getByRole('button', { name: 'Reject' })).toBeDisabled();

    await user.click(create);
    await user.click(rollback);
    expect(screen.queryByRole('alertdialog')).not.toBeInTheDocument();
    expect(wrote(sent)).toBe(false);
  });

  it('shows the reason instead of the policy to a key that may not read it', async () => {
    const why = 'this key may not read the policy (policy.read)';
    const { sent } = mockFetch(routes([], me({ 'policy.read': { allowed: false, reason: why } })));
    open();
    expect(await screen.findByText(why)).toBeInTheDocument();
    expect(screen.queryByRole('table')).not.toBeInTheDocument();
    expect(sent.some((r) => r.url.pathname.startsWith('/api/v1/policy'))).toBe(false);
  });
});
