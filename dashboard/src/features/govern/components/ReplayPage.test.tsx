import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute } from '@/testing';

import { ReplayPage } from './ReplayPage';

function me(allowed: Record<string, boolean>, reason = 'forbidden: the role user may not simulate a policy') {
  return {
    principal_id: 'p-1',
    tenant: 'default',
    role: 'admin',
    actions: Object.fromEntries(
      Object.entries(allowed).map(([act, ok]) => [act, ok ? { allowed: true } : { allowed: false, reason, code: 'forbidden' }]),
    ),
  };
}

const BUNDLES = {
  items: [
    { id: 'core/in-force', enabled: true, rule_count: 3 },
    { id: 'drafts/deny-echo', enabled: false, rule_count: 1 },
  ],
};

function change(i: number) {
  return {
    job_id: `job-${i}`,
    topic: 'job.echo',
    tenant: 'default',
    original_decision: 'ALLOW',
    new_decision: 'DENY',
    new_rule_id: 'deny-echo',
    new_reason: 'no echo',
    direction: 'escalated',
    kind: 'allow_to_deny',
    at: '2026-01-01T10:00:00Z',
  };
}

function answer(fields: object = {}) {
  return {
    replay_id: 'r-1',
    policy_snapshot: 'snap-1',
    tenant: 'default',
    summary: { total_jobs: 25, evaluated: 25, escalated: 23, relaxed: 0, unchanged: 2, errored: 0, scanned: 30 },
    rule_hits: [{ rule_id: 'deny-echo', decision: 'DENY', count: 23 }],
    changes: Array.from({ length: 23 }, (_, i) => change(i + 1)),
    warnings: ['velocity windows are not replayed'],
    truncated: false,
    stopped_by: null,
    next_cursor: null,
    order: 'newest_first',
    ...fields,
  };
}

function routes(acts: Record<string, boolean>, replay: Partial<FakeRoute> = {}): FakeRoute[] {
  return [
    { path: '/api/v1/me', body: me(acts) },
    { path: '/api/v1/policy/bundles', body: BUNDLES },
    { method: 'POST', path: '/api/v1/policy/replay', body: answer(), ...replay },
  ];
}

const ALL = { 'policy.simulate': true, 'policy.read': true };
const open = () => renderPage(<ReplayPage />, { path: '/govern/replay' });

async function chooseDraft() {
  const select = await screen.findByRole('combobox', { name: 'Draft bundle' }, { timeout: 3000 });
  // Only drafts are offered.
  expect(within(select).queryByRole('option', { name: /core\/in-force/ })).toBeNull();
  await userEvent.setup().selectOptions(select, 'drafts/deny-echo');
}

describe('ReplayPage', () => {
  it('sends the draft and the window as RFC 3339, and shows how many decisions change', async () => {
    const { sent } = mockFetch(routes(ALL));
    open();
    await chooseDraft();
    fireEvent.change(screen.getByLabelText('From'), { target: { value: '2026-01-01T08:00' } });
    fireEvent.change(screen.getByLabelText('To'), { target: { value: '2026-01-01T20:30' } });
    const run = screen.getByRole('button', { name: 'Run replay' });
    await waitFor(() => expect(run).toBeEnabled());
    await userEvent.setup().click(run);

    await waitFor(() => expect(sent.some((r) => r.method === 'POST')).toBe(true));
    const post = sent.find((r) => r.method === 'POST')!;
    expect(post.url.pathname).toBe('/api/v1/policy/replay');
    expect(post.body).toEqual({
      from: new Date(2026, 0, 1, 8, 0).toISOString(),
      to: new Date(2026, 0, 1, 20, 30).toISOString(),
      candidate_bundle_id: 'drafts/deny-echo',
      max_jobs: 1000,
      limit: 1000,
    });

    expect(await screen.findByTestId('replay-changed')).toHaveTextContent('23 decisions change of 25 jobs decided again.');
    const facts = screen.getByText('Stricter (escalated)').nextElementSibling;
    expect(facts).toHaveTextContent('23');
    expect(screen.getByText('Index entries read').nextElementSibling).toHaveTextContent('30');
  });

  it('lists the changed jobs 20 a page, each linking to its job', async () => {
    mockFetch(routes(ALL));
    open();
    await chooseDraft();
    const user = userEvent.setup();
    await user.click(screen.getByRole('button', { name: 'Run replay' }));

    const table = await screen.findByRole('table', { name: /decision changes/ });
    let rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(20);
    const link = within(rows[0]).getByRole('link', { name: 'job-1' });
    expect(link).toHaveAttribute('href', '/jobs/job-1');
    expect(within(rows[0]).getByText('ALLOW')).toBeInTheDocument();
    expect(within(rows[0]).getByText('DENY')).toBeInTheDocument();
    expect(within(rows[0]).getByText('deny-echo')).toBeInTheDocument();
    expect(screen.getByText('Showing 1–20 of 23.')).toBeInTheDocument();

    await user.click(screen.getByRole('button', { name: 'Next page' }));
    rows = within(screen.getByRole('table', { name: /decision changes/ })).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(3);
    expect(within(rows[2]).getByRole('link', { name: 'job-23' })).toHaveAttribute('href', '/jobs/job-23');
    expect(screen.getByRole('button', { name: 'Next page' })).toBeDisabled();
  });

  it('reads further with the cursor and adds the next call to the counts', async () => {
    let calls = 0;
    const { sent } = mockFetch(
      routes(ALL, {
        respond: () => {
          calls += 1;
          const body =
            calls === 1
              ? answer({
                  summary: { total_jobs: 2, evaluated: 2, escalated: 1, relaxed: 0, unchanged: 1, errored: 0, scanned: 1000 },
                  changes: [change(1)],
                  truncated: true,
                  stopped_by: 'max_jobs',
                  next_cursor: 'cursor-2',
                })
              : answer({
                  summary: { total_jobs: 1, evaluated: 1, escalated: 0, relaxed: 1, unchanged: 0, errored: 0, scanned: 5 },
                  changes: [{ ...change(2), original_decision: 'DENY', new_decision: 'ALLOW', direction: 'relaxed' }],
                });
          return new Response(JSON.stringify(body), { headers: { 'Content-Type': 'application/json' } });
        },
      }),
    );
    open();
    await chooseDraft();
    const user = userEvent.setup();
    await user.click(screen.getByRole('button', { name: 'Run replay' }));
    expect(await screen.findByTestId('replay-changed')).toHaveTextContent('1 decision changes');
    expect(screen.getByText(/stopped at its max_jobs bound/)).toBeInTheDocument();

    await user.click(screen.getByRole('button', { name: 'Read further' }));
    await waitFor(() => expect(screen.getByTestId('replay-changed')).toHaveTextContent('2 decisions change of 3 jobs'));
    const posts = sent.filter((r) => r.method === 'POST');
    expect(posts[1].body).toMatchObject({ candidate_bundle_id: 'drafts/deny-echo', cursor: 'cursor-2' });
    expect(screen.getByRole('link', { name: 'job-2' })).toHaveAttribute('href', '/jobs/job-2');
    expect(screen.queryByRole('button', { name: 'Read further' })).toBeNull();
  });

  it('replays pasted content', async () => {
    const { sent } = mockFetch(routes(ALL));
    open();
    const user = userEvent.setup();
    await user.click(await screen.findByRole('radio', { name: 'Pasted bundle content' }));
    fireEvent.change(screen.getByRole('textbox', { name: 'Bundle content (YAML)' }), {
      target: { value: 'rules:\n  - id: x\n    decision: deny\n' },
    });
    await user.click(screen.getByRole('button', { name: 'Run replay' }));
    await waitFor(() => expect(sent.some((r) => r.method === 'POST')).toBe(true));
    const body = sent.find((r) => r.method === 'POST')!.body as Record<string, unknown>;
    expect(body.candidate_content).toBe('rules:\n  - id: x\n    decision: deny\n');
    expect(body).not.toHaveProperty('candidate_bundle_id');
  });

  it('asks for a candidate and a valid window before sending', async () => {
    const { sent } = mockFetch(routes(ALL));
    open();
    const user = userEvent.setup();
    await screen.findByRole('combobox', { name: 'Draft bundle' });
    await user.click(screen.getByRole('button', { name: 'Run replay' }));
    expect(screen.getByRole('alert')).toHaveTextContent('Choose a draft bundle');
    await chooseDraft();
    fireEvent.change(screen.getByLabelText('From'), { target: { value: '2026-01-01T00:00' } });
    fireEvent.change(screen.getByLabelText('To'), { target: { value: '2026-01-10T00:00' } });
    await user.click(screen.getByRole('button', { name: 'Run replay' }));
    expect(screen.getByRole('alert')).toHaveTextContent('at most 7 days');
    expect(sent.some((r) => r.method === 'POST')).toBe(false);
  });

  it('shows the gateway refusing a candidate', async () => {
    mockFetch(
      routes(ALL, {
        status: 400,
        body: { error: "invalid policy bundle: line 3, rule 'x'", code: 'POLICY_VALIDATION_FAILED', status: 400 },
      }),
    );
    open();
    await chooseDraft();
    await userEvent.setup().click(screen.getByRole('button', { name: 'Run replay' }));
    expect(await screen.findByRole('alert')).toHaveTextContent("line 3, rule 'x'");
  });

  it('says so when nothing changes', async () => {
    mockFetch(
      routes(ALL, {
        body: answer({
          summary: { total_jobs: 4, evaluated: 4, escalated: 0, relaxed: 0, unchanged: 4, errored: 0, scanned: 4 },
          changes: [],
        }),
      }),
    );
    open();
    await chooseDraft();
    await userEvent.setup().click(screen.getByRole('button', { name: 'Run replay' }));
    expect(await screen.findByText('No decision changes')).toBeInTheDocument();
    expect(screen.getByTestId('replay-changed')).toHaveTextContent('0 decisions change of 4 jobs');
  });

  it('disables the run, with the reason, for a key that may not simulate', async () => {
    const { sent } = mockFetch(routes({ 'policy.simulate': false, 'policy.read': true }));
    open();
    const run = screen.getByRole('button', { name: 'Run replay' });
    await waitFor(() => expect(run).toHaveAccessibleDescription('forbidden: the role user may not simulate a policy'));
    expect(run).toBeDisabled();
    expect(screen.getByText('forbidden: the role user may not simulate a policy')).toBeInTheDocument();
    fireEvent.submit(run.closest('form')!);
    expect(sent.some((r) => r.method === 'POST')).toBe(false);
  });
});
