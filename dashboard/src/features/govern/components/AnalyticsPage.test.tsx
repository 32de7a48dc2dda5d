import { fireEvent, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { mockFetch, renderPage, type FakeRoute, type SentRequest } from '@/testing';

import { AnalyticsPage } from './AnalyticsPage';

const HISTOGRAM = [
  { le_ms: 1000, count: 0 },
  { le_ms: 10000, count: 1 },
  { le_ms: 60000, count: 3 },
  { le_ms: 600000, count: 3 },
  { le_ms: 3600000, count: 4 },
  { le_ms: 86400000, count: 4 },
  { le_ms: null, count: 4 },
];

const ANSWER = {
  tenant: 'default',
  time_range: { from: '2026-01-01T00:00:00Z', to: '2026-01-02T00:00:00Z' },
  rules: [
    {
      rule_id: 'allow-echo',
      hit_count: 17,
      approval_count: 0,
      approved_count: 0,
      rejected_count: 0,
      override_count: 0,
      override_rate: 0,
      avg_approval_latency_ms: null,
      approval_latency_histogram: [],
      daily_hits: [],
    },
    {
      rule_id: 'gate-payments',
      hit_count: 5,
      approval_count: 5,
      approved_count: 3,
      rejected_count: 1,
      override_count: 3,
      override_rate: 0.6,
      avg_approval_latency_ms: 42000,
      approval_latency_histogram: HISTOGRAM,
      daily_hits: [],
    },
  ],
  summary: {
    total_rules: 2,
    total_hits: 22,
    approvals_asked: 5,
    approved: 3,
    rejected: 1,
    total_overrides: 3,
    override_rate: 0.6,
    avg_approval_latency_ms: 42000,
    approval_latency_histogram: HISTOGRAM,
    highest_override_rule_id: 'gate-payments',
  },
  scanned: 40,
  truncated: false,
};

function routes(read: boolean, answer: Partial<FakeRoute> = {}): FakeRoute[] {
  return [
    {
      path: '/api/v1/me',
      body: {
        principal_id: 'p',
        tenant: 'default',
        role: 'user',
        actions: { 'policy.read': read ? { allowed: true } : { allowed: false, reason: 'forbidden: role user may not read the policy' } },
      },
    },
    { method: 'POST', path: '/api/v1/policy/analytics', body: ANSWER, ...answer },
  ];
}

const open = () => renderPage(<AnalyticsPage />, { path: '/govern/analytics' });
const posts = (sent: SentRequest[]) => sent.filter((r) => r.method === 'POST');

describe('AnalyticsPage', () => {
  it('asks for the last 24 hours first, as RFC 3339', async () => {
    const { sent } = mockFetch(routes(true));
    open();
    await screen.findByRole('region', { name: 'Rule hits' }, { timeout: 3000 });
    const body = posts(sent)[0].body as { from: string; to: string };
    expect(body.from).toMatch(/Z$/);
    expect(Date.parse(body.to) - Date.parse(body.from)).toBe(24 * 3600_000);
    expect(screen.getByRole('radio', { name: 'Last 24 hours' })).toBeChecked();
  });

  it('asks for the last 7 days, and for a custom window', async () => {
    const { sent } = mockFetch(routes(true));
    open();
    const user = userEvent.setup();
    await screen.findByRole('region', { name: 'Rule hits' }, { timeout: 3000 });
    await user.click(screen.getByRole('radio', { name: 'Last 7 days' }));
    await waitFor(() => expect(posts(sent)).toHaveLength(2));
    const week = posts(sent)[1].body as { from: string; to: string };
    expect(Date.parse(week.to) - Date.parse(week.from)).toBe(7 * 24 * 3600_000);

    await user.click(screen.getByRole('radio', { name: 'Custom' }));
    fireEvent.change(screen.getByLabelText('From'), { target: { value: '2026-02-01T00:00' } });
    fireEvent.change(screen.getByLabelText('To'), { target: { value: '2026-02-09T00:00' } });
    await user.click(screen.getByRole('button', { name: 'Show' }));
    expect(screen.getByRole('alert')).toHaveTextContent('at most 7 days');
    expect(posts(sent)).toHaveLength(2);

    fireEvent.change(screen.getByLabelText('To'), { target: { value: '2026-02-02T12:00' } });
    await user.click(screen.getByRole('button', { name: 'Show' }));
    await waitFor(() => expect(posts(sent)).toHaveLength(3));
    expect(posts(sent)[2].body).toEqual({
      from: new Date(2026, 1, 1, 0, 0).toISOString(),
      to: new Date(2026, 1, 2, 12, 0).toISOString(),
    });
  });

  it('draws the rule hits with a summary, and their numbers as a table', async () => {
    mockFetch(routes(true));
    open();
    const hits = await screen.findByRole('region', { name: 'Rule hits' }, { timeout: 3000 });
    expect(within(hits).getByRole('img')).toHaveAccessibleName(
      'Rule hits, 22 in all, by rule: allow-echo 17, gate-payments 5.',
    );
    const table = within(hits).getByRole('table', { name: 'Rule hits and approvals by rule' });
    const row = within(table).getByRole('row', { name: /gate-payments/ });
    expect(within(row).getAllByRole('cell').map((c) => c.textContent)).toEqual(['5', '5', '3', '1', '42 s']);
    expect(within(table).getByRole('row', { name: /allow-echo/ })).toHaveTextContent('17');
    expect(screen.getByTestId('analytics-total-hits')).toHaveTextContent('22');
    const totals = screen.getByTestId('analytics-total-hits').closest('dl') as HTMLElement;
    expect(within(totals).getByText('Override rate').nextElementSibling).toHaveTextContent('60%');
  });

  it('draws the latency histogram from the cumulative buckets', async () => {
    mockFetch(routes(true));
    open();
    const latency = await screen.findByRole('region', { name: 'Approval latency' }, { timeout: 3000 });
    const table = within(latency).getByRole('table', { name: 'Approval latency histogram' });
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows.map((r) => within(r).getAllByRole('cell').map((c) => c.textContent))).toEqual([
      ['0', '0'],
      ['1', '1'],
      ['2', '3'],
      ['0', '3'],
      ['1', '4'],
      ['0', '4'],
      ['0', '4'],
    ]);
    expect(within(latency).getByRole('img')).toHaveAccessibleName(/of 4 answered approvals: up to 1 s: 0, 1 s to 10 s: 1/);
  });

  it('shows the override and rejection rates per rule and in all', async () => {
    mockFetch(routes(true));
    open();
    const rates = await screen.findByRole('region', { name: 'Override and rejection rates' }, { timeout: 3000 });
    expect(within(rates).getByRole('img')).toHaveAccessibleName(/All rules overrides 60%, rejections 20%/);
    const table = within(rates).getByRole('table');
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(2); // all rules, and the one rule that asked
    expect(within(rows[1]).getByRole('rowheader')).toHaveTextContent('gate-payments');
    expect(within(rows[1]).getAllByRole('cell').map((c) => c.textContent)).toEqual(['5', '3', '0.6', '1', '0.2']);
  });

  it('says when no rule decided a job', async () => {
    mockFetch(routes(true, { body: { ...ANSWER, rules: [], summary: { total_rules: 0, total_hits: 0 } } }));
    open();
    expect(await screen.findByText('No rule decided a job in this window', {}, { timeout: 3000 })).toBeInTheDocument();
  });

  it('shows a failed read', async () => {
    mockFetch(routes(true, { status: 400, body: { error: 'the window spans more than 7 days', code: 'invalid_analytics_window' } }));
    open();
    expect(await screen.findByRole('alert', {}, { timeout: 3000 })).toHaveTextContent('invalid_analytics_window');
  });

  it('asks nothing, and says why, for a key that may not read the policy', async () => {
    const { sent } = mockFetch(routes(false));
    open();
    const refresh = screen.getByRole('button', { name: 'Refresh' });
    await waitFor(() => expect(refresh).toHaveAccessibleDescription('forbidden: role user may not read the policy'));
    expect(refresh).toBeDisabled();
    expect(posts(sent)).toHaveLength(0);
  });
});
