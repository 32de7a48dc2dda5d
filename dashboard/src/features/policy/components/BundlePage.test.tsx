import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { BundlePage } from './BundlePage';
import { me, meRoute, NO_CHANGE_REASON, READ_ONLY, SHA, wrote } from './fixtures';

const ID = 'secops/deny-prod';
const PATH = '/api/v1/policy/bundles/secops~deny-prod';
const CONTENT = [
  'rules:',
  '  - id: deny-prod-deploys',
  '    match: {topics: [job.deploy.prod]}',
  '    decision: deny',
  '    reason: no deploys to prod on Fridays',
  '',
].join('\n');

const STORED = {
  id: ID,
  content: CONTENT,
  enabled: false,
  source: 'secops',
  author: 'local-policy-owner',
  updated_at: '2026-11-27T02:40:00Z',
  rule_count: 1,
  sha256: SHA,
};

function routes(extra: FakeRoute[] = [], who: unknown = me(), stored: unknown = STORED): FakeRoute[] {
  return [
    ...extra,
    meRoute(who),
    stored === null
      ? { path: PATH, status: 404, body: { error: 'bundle not found', code: 'not_found' } }
      : { path: PATH, body: stored },
  ];
}

const open = () => renderPage(<BundlePage />, { path: '/policy/bundles/:id', url: '/policy/bundles/secops~deny-prod' });

async function editor() {
  const area = (await screen.findByLabelText('Bundle YAML')) as HTMLTextAreaElement;
  await waitFor(() => expect(area.value).not.toBe(''));
  return area;
}

async function confirmDialog(user: ReturnType<typeof userEvent.setup>, button: string, yes: string) {
  await user.click(screen.getByRole('button', { name: button }));
  await user.click(within(screen.getByRole('alertdialog')).getByRole('button', { name: yes }));
}

describe('BundlePage', () => {
  it('loads the bundle, reading ~ in the URL as /', async () => {
    mockFetch(routes());
    open();
    expect(await screen.findByRole('heading', { level: 1, name: `Bundle ${ID}` })).toBeInTheDocument();
    expect((await editor()).value).toBe(CONTENT);
    expect(screen.getByText('draft')).toBeInTheDocument();
    // Line numbers beside the text: one per line.
    expect(screen.getByTestId('editor-gutter').children).toHaveLength(CONTENT.split('\n').length);
    expect(screen.getByText(/No changes: the editor holds the stored draft/)).toBeInTheDocument();
  });

  it('saves an edit of a draft without changing its state', async () => {
    const { sent } = mockFetch(routes([{ method: 'PUT', path: PATH, body: { id: ID, enabled: false } }]));
    open();
    const user = userEvent.setup();
    const area = await editor();
    fireEvent.change(area, { target: { value: CONTENT.replace('Fridays', 'weekends') } });
    await user.type(screen.getByLabelText(/^Message/), 'wider');
    await user.click(screen.getByRole('button', { name: 'Save draft' }));

    await waitFor(() =>
      expect(sent.find((r) => r.method === 'PUT')?.body).toEqual({ content: CONTENT.replace('Fridays', 'weekends'), message: 'wider' }),
    );
    expect(await screen.findByText(`Saved ${ID} as a draft.`)).toBeInTheDocument();
  });

  it('stores a bundle that does not exist yet as a draft', async () => {
    const { sent } = mockFetch(routes([{ method: 'PUT', path: PATH, body: { id: ID, enabled: false } }], me(), null));
    open();
    const user = userEvent.setup();
    const area = (await screen.findByLabelText('Bundle YAML')) as HTMLTextAreaElement;
    expect(screen.getByText('New: not saved yet')).toBeInTheDocument();
    fireEvent.change(area, { target: { value: CONTENT } });
    await user.click(screen.getByRole('button', { name: 'Save draft' }));
    await waitFor(() => expect(sent.find((r) => r.method === 'PUT')?.body).toEqual({ content: CONTENT, enabled: false }));
  });

  it('shows a validation error at the line it names, and goes there', async () => {
    const message = "invalid policy bundle: line 4, rule 'deny-prod-deploys': rules[0].decision: Input should be 'allow', 'deny'";
    mockFetch(routes([{ method: 'PUT', path: PATH, status: 400, body: { error: message, code: 'POLICY_VALIDATION_FAILED', status: 400 } }]));
    open();
    const user = userEvent.setup();
    const area = await editor();
    const broken = CONTENT.replace('decision: deny', 'decision: nope');
    fireEvent.change(area, { target: { value: broken } });
    await user.click(screen.getByRole('button', { name: 'Save draft' }));

    const go = await screen.findByRole('button', { name: 'Go to line 4' });
    expect(area).toHaveAttribute('aria-invalid', 'true');
    expect(area).toHaveAccessibleDescription(/Line 4, rule deny-prod-deploys: .*rules\[0\]\.decision/);
    const marked = screen.getByTestId('editor-gutter').querySelector('.policy-gutter-error');
    expect(marked).toHaveAttribute('data-line', '4');
    expect(marked).toHaveTextContent('⚠ 4');

    await user.click(go);
    expect(area).toHaveFocus();
    expect(broken.slice(area.selectionStart, area.selectionEnd)).toBe('    decision: nope');
  });

  it('shows the diff against the stored content with words, not colour alone', async () => {
    mockFetch(routes());
    open();
    const area = await editor();
    fireEvent.change(area, { target: { value: CONTENT.replace('decision: deny', 'decision: require_approval') } });

    const table = await screen.findByRole('table', { name: /1 line added, 1 line removed/ });
    const removed = within(table).getByText('decision: deny').closest('tr') as HTMLElement;
    expect(removed).toHaveTextContent('Removed');
    expect(within(removed).getAllByRole('cell')[1]).toHaveTextContent('4');
    const added = within(table).getByText('decision: require_approval').closest('tr') as HTMLElement;
    expect(added).toHaveTextContent('Added');
    expect(within(table).getAllByText('Unchanged').length).toBeGreaterThan(0);
  });

  it('simulates a request against the editor text and shows the decision', async () => {
    const { sent } = mockFetch(
      routes([
        {
          method: 'POST',
          path: `${PATH}/simulate`,
          body: { decision: 'DENY', rule_id: 'deny-prod-deploys', ruleId: 'deny-prod-deploys', reason: 'no deploys to prod on Fridays' },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    const area = await editor();
    const edited = `${CONTENT}# edited\n`;
    fireEvent.change(area, { target: { value: edited } });
    await user.type(screen.getByLabelText('Topic'), 'job.deploy.prod');
    await user.type(screen.getByLabelText(/^Capability/), 'deploy');
    await user.type(screen.getByLabelText(/^Risk tags/), 'prod, high');
    fireEvent.change(screen.getByLabelText(/^Labels/), { target: { value: '{"env": "prod"}' } });
    await user.click(screen.getByRole('button', { name: 'Simulate' }));

    const facts = await screen.findByLabelText('Simulated decision');
    expect(within(facts).getByText('DENY')).toBeInTheDocument();
    expect(within(facts).getByText('deny-prod-deploys')).toBeInTheDocument();
    expect(within(facts).getByText('no deploys to prod on Fridays')).toBeInTheDocument();
    expect(sent.find((r) => r.method === 'POST')?.body).toEqual({
      request: { topic: 'job.deploy.prod', capability: 'deploy', risk_tags: ['prod', 'high'], labels: { env: 'prod' } },
      content: edited,
    });
  });

  it('refuses labels that are not a JSON object before sending', async () => {
    const { sent } = mockFetch(routes());
    open();
    const user = userEvent.setup();
    await editor();
    await user.type(screen.getByLabelText('Topic'), 'job.x');
    fireEvent.change(screen.getByLabelText(/^Labels/), { target: { value: '[1]' } });
    await user.click(screen.getByRole('button', { name: 'Simulate' }));
    expect(await screen.findByText(/Labels must be a JSON object/)).toBeInTheDocument();
    expect(wrote(sent)).toBe(false);
  });

  it('publishes the bundle after confirming and shows the snapshot to roll back to', async () => {
    const { sent } = mockFetch(
      routes([
        {
          method: 'POST',
          path: '/api/v1/policy/publish',
          body: { snapshot_before: 'snap-before', snapshot_after: 'snap-after', published: [ID], id: 'snap-after' },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    await editor();
    await user.type(screen.getByLabelText(/^Message/), 'reviewed');
    await confirmDialog(user, 'Publish', 'Yes, publish');

    await waitFor(() => expect(sent.find((r) => r.method === 'POST')?.body).toEqual({ bundle_ids: [ID], message: 'reviewed' }));
    expect(await screen.findByText(/Published secops\/deny-prod\. Snapshot before: snap-before\./)).toBeInTheDocument();
  });

  it('shows a publish kept for a second person as waiting, with the proposal', async () => {
    mockFetch(
      routes([
        {
          method: 'POST',
          path: '/api/v1/policy/publish',
          status: 202,
          body: {
            status: 'pending_confirmation',
            proposal: { id: 'prop-1', action: 'publish', bundle_ids: [ID], proposed_by: 'alice', expires_at: '2026-11-28T02:40:00Z' },
          },
        },
      ]),
    );
    open();
    const user = userEvent.setup();
    await editor();
    await confirmDialog(user, 'Publish', 'Yes, publish');
    expect(await screen.findByText('Waiting for a second person.')).toBeInTheDocument();
    expect(screen.getByText('prop-1')).toBeInTheDocument();
    expect(screen.getByText(`Publish ${ID}`)).toBeInTheDocument();
  });

  it('does not publish while the editor holds unsaved changes', async () => {
    mockFetch(routes());
    open();
    const area = await editor();
    fireEvent.change(area, { target: { value: `${CONTENT}# more\n` } });
    const publish = screen.getByRole('button', { name: 'Publish' });
    expect(publish).toBeDisabled();
    expect(publish).toHaveAccessibleDescription(/unsaved changes/);
  });

  it('deletes the draft after confirming and goes back to the list', async () => {
    const { sent } = mockFetch(routes([{ method: 'DELETE', path: PATH, status: 204 }]));
    open();
    const user = userEvent.setup();
    await editor();
    await confirmDialog(user, 'Delete draft', 'Yes, delete');
    await waitFor(() => expect(sent.some((r) => r.method === 'DELETE' && r.url.pathname === PATH)).toBe(true));
    await waitFor(() => expect(screen.getByTestId('location')).toHaveTextContent(/^\/policy$/));
  });

  it('shows every write as unavailable, with the reason, and sends none, to a key that may not change the policy', async () => {
    const { sent } = mockFetch(routes([], READ_ONLY));
    open();
    const user = userEvent.setup();
    await editor();
    for (const name of ['Save draft', 'Publish', 'Delete draft']) {
      const button = screen.getByRole('button', { name });
      expect(button).toBeDisabled();
      expect(button).toHaveAccessibleDescription(NO_CHANGE_REASON);
      await user.click(button);
    }
    expect(screen.queryByRole('alertdialog')).not.toBeInTheDocument();
    // Simulating is still allowed: it changes nothing.
    expect(screen.getByRole('button', { name: 'Simulate' })).toBeEnabled();
    expect(wrote(sent)).toBe(false);
  });

  it('shows simulate as unavailable without policy.simulate', async () => {
    const why = 'a simulation takes an admin or policy.write key';
    mockFetch(routes([], me({ 'policy.simulate': { allowed: false, reason: why } })));
    open();
    await editor();
    const simulate = screen.getByRole('button', { name: 'Simulate' });
    expect(simulate).toBeDisabled();
    expect(simulate).toHaveAccessibleDescription(why);
  });

  it('shows the reason instead of the bundle to a key that may not read the policy', async () => {
    const why = 'this key may not read the policy';
    const { sent } = mockFetch(routes([], me({ 'policy.read': { allowed: false, reason: why } })));
    open();
    expect(await screen.findByText(why)).toBeInTheDocument();
    expect(screen.queryByLabelText('Bundle YAML')).not.toBeInTheDocument();
    expect(sent.some((r) => r.url.pathname === PATH)).toBe(false);
  });
});
