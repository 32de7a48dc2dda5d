import { act, screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it, vi } from 'vitest';

import { json, mockFetch, renderPage, type FakeRoute, type SentRequest } from '@/testing';

import { TAIL_POLL_MS } from '../api';
import { AuditPage } from './AuditPage';

const ADMIN = {
  principal_id: 'admin-1',
  tenant: 'default',
  role: 'admin',
  actions: { 'audit.read': { allowed: true }, 'audit.hold': { allowed: true } },
};

const READER = {
  principal_id: 'auditor',
  tenant: 'default',
  role: 'audit.read',
  actions: {
    'audit.read': { allowed: true },
    'audit.hold': { allowed: false, reason: 'Setting a legal hold takes role admin.', code: 'forbidden' },
  },
};

function event(seq: number, fields: object = {}) {
  return {
    seq,
    hash: `h${seq}`,
    type: 'job.submit.gated',
    severity: 'MEDIUM',
    tenant: 'default',
    actor: 'submitter',
    job_id: `job-${seq}`,
    occurred_at: '2026-01-01T10:00:00Z',
    at: 1_767_261_600_000_000,
    ...fields,
  };
}

const OK = { status: 'ok', total_events: 12, verified_events: 12, first_seq: 1, last_seq: 12, gaps: [], hmac_verified: false, tenant: 'default' };

function routes({
  events = [event(3), event(2)],
  verify = OK,
  hold = { tenant: 'default', held: false },
  me = ADMIN,
  extra = [],
}: {
  events?: object[] | ((r: SentRequest) => Response);
  verify?: object;
  hold?: object;
  me?: object;
  extra?: FakeRoute[];
} = {}): FakeRoute[] {
  return [
    { path: '/api/v1/me', body: me },
    typeof events === 'function'
      ? { path: '/api/v1/audit/events', respond: events }
      : { path: '/api/v1/audit/events', body: { items: events, next_cursor: null, returned: events.length } },
    { path: '/api/v1/audit/verify', body: verify },
    { path: '/api/v1/audit/hold', body: hold },
    ...extra,
  ];
}

const open = (url = '/audit') => renderPage(<AuditPage />, { path: '/audit', url });

const eventReads = (sent: SentRequest[]) => sent.filter((r) => r.url.pathname === '/api/v1/audit/events');

describe('AuditPage', () => {
  it('lists the events newest first, with severity as a word', async () => {
    mockFetch(routes());
    open();
    const table = await screen.findByRole('table', { name: /Audit events/ });
    const rows = within(table).getAllByRole('row');
    expect(rows).toHaveLength(3);
    expect(within(rows[1]).getByText('3')).toBeInTheDocument();
    expect(within(rows[1]).getByRole('link', { name: 'job-3' })).toHaveAttribute('href', '/jobs/job-3');
    expect(within(rows[1]).getByText('MEDIUM')).toBeInTheDocument();
  });

  it('sends the filters as the query string', async () => {
    const { sent } = mockFetch(routes());
    open();
    const user = userEvent.setup();
    await screen.findByRole('table', { name: /Audit events/ });

    await user.type(screen.getByRole('searchbox', { name: 'Type' }), 'job.*');
    await user.selectOptions(screen.getByRole('combobox', { name: 'Severity' }), 'HIGH');
    await user.type(screen.getByRole('searchbox', { name: 'Actor' }), 'alice');
    await user.type(screen.getByRole('searchbox', { name: 'Job ID' }), 'job-9');
    await user.type(screen.getByRole('searchbox', { name: 'Search' }), 'prod');
    await user.click(screen.getByRole('button', { name: 'Apply filters' }));

    await waitFor(() => expect(eventReads(sent).at(-1)?.url.searchParams.get('type')).toBe('job.*'));
    const params = eventReads(sent).at(-1)!.url.searchParams;
    expect(params.get('severity')).toBe('HIGH');
    expect(params.get('actor')).toBe('alice');
    expect(params.get('job_id')).toBe('job-9');
    expect(params.get('search')).toBe('prod');
    expect(params.get('limit')).toBe('50');
    expect(params.has('cursor')).toBe(false);
    expect(screen.getByTestId('location')).toHaveTextContent('type=job.*');
  });

  it('reads the filters of the URL, from and to as RFC 3339', async () => {
    const { sent } = mockFetch(routes());
    open('/audit?type=approval.approve&from=2026-01-01T10:00&to=2026-01-02T10:00');
    await screen.findByRole('table', { name: /Audit events/ });
    const params = eventReads(sent).at(-1)!.url.searchParams;
    expect(params.get('type')).toBe('approval.approve');
    expect(params.get('from')).toBe(new Date('2026-01-01T10:00').toISOString());
    expect(params.get('to')).toBe(new Date('2026-01-02T10:00').toISOString());
  });

  it('pages to older events with next_cursor and back', async () => {
    const { sent } = mockFetch(
      routes({
        events: (r) =>
          r.url.searchParams.get('cursor') === '2'
            ? json({ items: [event(1, { job_id: 'job-old' })], next_cursor: null })
            : json({ items: [event(3), event(2)], next_cursor: '2' }),
      }),
    );
    open();
    const user = userEvent.setup();
    await screen.findByRole('link', { name: 'job-3' });
    expect(screen.getByRole('button', { name: 'Newer' })).toBeDisabled();

    await user.click(screen.getByRole('button', { name: 'Older' }));
    expect(await screen.findByRole('link', { name: 'job-old' })).toBeInTheDocument();
    expect(eventReads(sent).at(-1)!.url.searchParams.get('cursor')).toBe('2');
    expect(screen.getByRole('button', { name: 'Older' })).toBeDisabled();

    await user.click(screen.getByRole('button', { name: 'Newer' }));
    expect(await screen.findByRole('link', { name: 'job-3' })).toBeInTheDocument();
  });

  it('hides the log\'s own reads unless asked', async () => {
    mockFetch(routes({ events: [event(4, { type: 'audit.read', severity: 'INFO', job_id: undefined }), event(3)] }));
    open();
    await screen.findByRole('link', { name: 'job-3' });
    expect(screen.queryByText('audit.read')).not.toBeInTheDocument();
    expect(screen.getByText(/1 read of the log itself hidden/)).toBeInTheDocument();

    await userEvent.setup().click(screen.getByRole('checkbox', { name: /Show reads of the log/ }));
    expect(await screen.findByText('audit.read')).toBeInTheDocument();
  });

  it('says when nothing matches, and when the log cannot be read', async () => {
    mockFetch(routes({ events: [] }));
    const first = open('/audit?type=nothing.*');
    expect(await screen.findByText('No audit events match these filters')).toBeInTheDocument();
    first.unmount();

    mockFetch(routes({ events: () => json({ error: 'store unavailable', code: 'store_unavailable', status: 503 }, 503) }));
    open();
    expect(await screen.findByRole('alert')).toHaveTextContent('store unavailable');
  });

  it('shows a verified chain with a shape and a word', async () => {
    mockFetch(routes());
    open();
    const panel = await screen.findByRole('region', { name: 'Chain integrity' });
    const badge = await within(panel).findByText('Chain verified');
    expect(badge.parentElement).toHaveAttribute('data-status', 'ok');
    expect(badge.parentElement!.querySelector('[aria-hidden="true"]')).toHaveTextContent('✔');
    expect(within(panel).getByText(/12 of 12 entries verified/)).toBeInTheDocument();
  });

  it('names the first bad seq of a compromised chain', async () => {
    mockFetch(
      routes({
        verify: {
          ...OK,
          status: 'compromised',
          verified_events: 6,
          gaps: [
            { at_seq: 7, type: 'hash_mismatch' },
            { at_seq: 9, type: 'missing', count: 2 },
          ],
        },
      }),
    );
    open();
    const panel = await screen.findByRole('region', { name: 'Chain integrity' });
    expect(await within(panel).findByText('Compromised')).toBeInTheDocument();
    expect(within(panel).getByText(/First bad entry at seq 7 \(hash mismatch\)/)).toBeInTheDocument();
    expect(within(panel).getByText(/All findings \(2\)/)).toBeInTheDocument();
  });

  it('shows a partial check', async () => {
    mockFetch(routes({ verify: { ...OK, status: 'partial', exported_through_seq: 100 } }));
    open();
    const panel = await screen.findByRole('region', { name: 'Chain integrity' });
    expect(await within(panel).findByText('Partial')).toBeInTheDocument();
    expect(within(panel).getByText(/export mark at seq 100/)).toBeInTheDocument();
  });

  it('lets an admin set the legal hold with a reason', async () => {
    const { sent } = mockFetch(
      routes({ extra: [{ method: 'PUT', path: '/api/v1/audit/hold', body: { tenant: 'default', held: true } }] }),
    );
    open();
    const user = userEvent.setup();
    const panel = await screen.findByRole('region', { name: 'Legal hold' });
    expect(await within(panel).findByText('No hold')).toBeInTheDocument();
    await user.type(within(panel).getByRole('textbox', { name: 'Reason for the hold' }), 'case 17');
    await user.click(within(panel).getByRole('button', { name: 'Set the hold' }));
    await waitFor(() => expect(sent.find((r) => r.method === 'PUT')?.body).toEqual({ reason: 'case 17' }));
  });

  it('lets an admin clear the hold after confirming', async () => {
    const { sent } = mockFetch(
      routes({
        hold: { tenant: 'default', held: true, by: 'admin-1', at: '2026-01-01T10:00:00Z', reason: 'case 17' },
        extra: [{ method: 'DELETE', path: '/api/v1/audit/hold', body: { tenant: 'default', held: false, cleared: true } }],
      }),
    );
    open();
    const user = userEvent.setup();
    const panel = await screen.findByRole('region', { name: 'Legal hold' });
    expect(await within(panel).findByText('On hold')).toBeInTheDocument();
    expect(within(panel).getByText(/case 17/)).toBeInTheDocument();
    await user.click(within(panel).getByRole('button', { name: 'Clear the hold' }));
    await user.click(within(panel).getByRole('button', { name: 'Yes, clear the hold' }));
    await waitFor(() => expect(sent.some((r) => r.method === 'DELETE')).toBe(true));
  });

  it('shows the hold controls disabled, with the reason, to a key that may not change it', async () => {
    const { sent } = mockFetch(routes({ me: READER }));
    open();
    const panel = await screen.findByRole('region', { name: 'Legal hold' });
    const button = await within(panel).findByRole('button', { name: 'Set the hold' });
    expect(button).toBeDisabled();
    expect(button).toHaveAccessibleDescription('Setting a legal hold takes role admin.');
    expect(within(panel).getByRole('textbox', { name: 'Reason for the hold' })).toBeDisabled();
    expect(sent.some((r) => r.method === 'PUT')).toBe(false);
  });

  it('shows the clear button disabled with the reason too', async () => {
    mockFetch(routes({ me: READER, hold: { tenant: 'default', held: true, by: 'admin-1' } }));
    open();
    const panel = await screen.findByRole('region', { name: 'Legal hold' });
    const button = await within(panel).findByRole('button', { name: 'Clear the hold' });
    expect(button).toBeDisabled();
    expect(button).toHaveAccessibleDescription('Setting a legal hold takes role admin.');
  });

  it('reads nothing for a key that may not read the audit log, and says why', async () => {
    const { sent } = mockFetch(
      routes({ me: { ...READER, role: 'user', actions: { 'audit.read': { allowed: false, reason: 'Reading the audit log takes role admin or audit.read.' } } } }),
    );
    open();
    expect(await screen.findByText('Reading the audit log takes role admin or audit.read.')).toBeInTheDocument();
    expect(sent.some((r) => r.url.pathname.startsWith('/api/v1/audit'))).toBe(false);
  });

  it('reads the newest page again while the live tail is on, and not with it off', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    try {
      const { sent } = mockFetch(routes({ events: () => json({ items: [event(eventReads(sent).length + 2)], next_cursor: null }) }));
      open('/audit?tail=1');
      await screen.findByRole('link', { name: 'job-3' });
      expect(screen.getByRole('checkbox', { name: 'Live tail' })).toBeChecked();

      act(() => vi.advanceTimersByTime(TAIL_POLL_MS));
      // A new event shows up without a reload.
      expect(await screen.findByRole('link', { name: 'job-4' })).toBeInTheDocument();

      await userEvent.setup().click(screen.getByRole('checkbox', { name: 'Live tail' }));
      const reads = eventReads(sent).length;
      act(() => vi.advanceTimersByTime(3 * TAIL_POLL_MS));
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(eventReads(sent).length).toBe(reads);
    } finally {
      vi.useRealTimers();
    }
  });
});
