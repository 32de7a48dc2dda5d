import { useEffect, useId, useMemo, useState, type FormEvent, type ReactNode } from 'react';
import { Link, useSearchParams } from 'react-router';

import { EmptyState, ErrorState, formatTime, JsonView, Loading, Page, Unavailable } from '@/components';
import { useCapabilities, useMe } from '@/lib/capabilities';
import { InvalidationThrottle } from '@/lib/invalidation';
import { useLiveEvents } from '@/lib/live';
import { useQueryClient } from '@tanstack/react-query';

import { useAuditEvents, useAuditVerify, type AuditEvent } from '../api';
import '../audit.css';
import {
  auditQuery,
  filtersFrom,
  filtersToParams,
  hasFilters,
  NO_FILTERS,
  READ_TYPES,
  SEVERITIES,
  type AuditFilters,
} from '../filters';
import { HoldPanel } from './HoldPanel';
import { VerifyPanel } from './VerifyBadge';

/** How often live events may make the tail read the first page again, in ms. */
const TAIL_THROTTLE_MS = 2000;

const SEVERITY_LOOK: Record<string, { glyph: string; tone: string }> = {
  CRITICAL: { glyph: '✖', tone: 'danger' },
  HIGH: { glyph: '▲', tone: 'danger' },
  MEDIUM: { glyph: '◆', tone: 'warning' },
  LOW: { glyph: '●', tone: 'active' },
  INFO: { glyph: '○', tone: 'neutral' },
};

function Severity({ value }: { value: string | undefined }) {
  const word = (value ?? '').toUpperCase() || 'UNKNOWN';
  const look = SEVERITY_LOOK[word] ?? { glyph: '?', tone: 'neutral' };
  return (
    <span className={`badge badge-${look.tone}`}>
      <span className="badge-glyph" aria-hidden="true">
        {look.glyph}
      </span>
      <span>{word}</span>
    </span>
  );
}

function Field({ label, children }: { label: string; children: (id: string) => ReactNode }) {
  const id = useId();
  return (
    <div className="field">
      <label htmlFor={id}>{label}</label>
      {children(id)}
    </div>
  );
}

function Filters({ filters, onChange }: { filters: AuditFilters; onChange: (next: AuditFilters) => void }) {
  const [draft, setDraft] = useState(filters);
  const set = (name: keyof AuditFilters) => (e: { target: { value: string } }) =>
    setDraft((d) => ({ ...d, [name]: e.target.value }));

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    onChange(draft);
  }

  return (
    <form className="filters audit-filters" onSubmit={submit} aria-label="Filter audit events">
      <Field label="Type">
        {(id) => <input id={id} type="search" value={draft.type} placeholder="job.* or approval.approve" onChange={set('type')} />}
      </Field>
      <Field label="Severity">
        {(id) => (
          <select id={id} value={draft.severity} onChange={set('severity')}>
            <option value="">Any severity</option>
            {SEVERITIES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        )}
      </Field>
      <Field label="Actor">{(id) => <input id={id} type="search" value={draft.actor} onChange={set('actor')} />}</Field>
      <Field label="Job ID">{(id) => <input id={id} type="search" value={draft.job_id} onChange={set('job_id')} />}</Field>
      <Field label="From">{(id) => <input id={id} type="datetime-local" step={1} value={draft.from} onChange={set('from')} />}</Field>
      <Field label="To">{(id) => <input id={id} type="datetime-local" step={1} value={draft.to} onChange={set('to')} />}</Field>
      <Field label="Search">
        {(id) => <input id={id} type="search" value={draft.search} placeholder="type, actor, job, reason…" onChange={set('search')} />}
      </Field>
      <button type="submit">Apply filters</button>
      {hasFilters(filters) && (
        <button
          type="button"
          onClick={() => {
            setDraft(NO_FILTERS);
            onChange(NO_FILTERS);
          }}
        >
          Clear filters
        </button>
      )}
    </form>
  );
}

function EventRow({ event }: { event: AuditEvent }) {
  const details = { ...(event.extra ? { extra: event.extra } : {}), ...(event.snapshot !== undefined ? { snapshot: event.snapshot } : {}) };
  return (
    <tr>
      <td className="num">{event.seq}</td>
      <td>{event.occurred_at ? formatTime(event.occurred_at) : ''}</td>
      <td className="mono">{event.malformed ? 'malformed entry' : event.type}</td>
      <td>{event.malformed ? '' : <Severity value={event.severity} />}</td>
      <td className="mono">{event.actor}</td>
      <td className="cell-id">
        {event.job_id && <Link to={`/jobs/${encodeURIComponent(event.job_id)}`}>{event.job_id}</Link>}
        {event.run_id && (
          <>
            {event.job_id && <br />}
            <Link to={`/runs/${encodeURIComponent(event.run_id)}`}>Run {event.run_id}</Link>
          </>
        )}
      </td>
      <td>
        {event.reason}
        {Object.keys(details).length > 0 && (
          <details className="audit-details">
            <summary>Details of seq {event.seq}</summary>
            <JsonView value={details} />
          </details>
        )}
      </td>
    </tr>
  );
}

function Events({ filters, tail, showReads }: { filters: AuditFilters; tail: boolean; showReads: boolean }) {
  const [cursors, setCursors] = useState<string[]>([]);
  const cursor = cursors[cursors.length - 1];
  const onFirstPage = cursors.length === 0;
  const events = useAuditEvents(filters, cursor, { enabled: true, tail });
  const queryClient = useQueryClient();
  const firstKey = useMemo(() => ['audit', 'events', auditQuery(filters)], [filters]);

  // The tail, faster than its 5 s poll: a live event (a job's change, a run's) is often an
  // audited act, so the first page is read again, at most once per TAIL_THROTTLE_MS.
  // Worker heartbeats are never audited and are left out: each read is itself audited.
  const throttle = useMemo(
    () => new InvalidationThrottle((key) => void queryClient.invalidateQueries({ queryKey: key, exact: true }), TAIL_THROTTLE_MS),
    [queryClient],
  );
  useEffect(() => () => throttle.dispose(), [throttle]);
  useLiveEvents((event) => {
    if (!tail || !onFirstPage || event.type === 'worker.heartbeat') return;
    throttle.request(firstKey);
  });

  if (events.isPending) return <Loading label="Loading audit events…" />;
  if (events.isError) return <ErrorState error={events.error} retry={() => void events.refetch()} />;
  const { items, nextCursor } = events.data;
  const readsAsked = filters.type.trim().startsWith('audit.');
  const shown = showReads || readsAsked ? items : items.filter((e) => !READ_TYPES.has(e.type ?? ''));
  const hidden = items.length - shown.length;
  const filtered = hasFilters(filters);

  const pager = (
    <nav className="pager" aria-label="Audit pages">
      <button type="button" onClick={() => setCursors([])} disabled={onFirstPage}>
        Newest
      </button>
      <button type="button" onClick={() => setCursors((c) => c.slice(0, -1))} disabled={onFirstPage}>
        Newer
      </button>
      <button type="button" onClick={() => nextCursor && setCursors((c) => [...c, nextCursor])} disabled={!nextCursor}>
        Older
      </button>
    </nav>
  );

  return (
    <>
      {tail && !onFirstPage && (
        <p className="notice notice-warning">The live tail follows the newest page; go back to Newest to see new events.</p>
      )}
      {shown.length === 0 ? (
        onFirstPage && !nextCursor ? (
          <EmptyState
            title={filtered ? 'No audit events match these filters' : 'No audit events yet'}
            description={filtered ? 'Try other filters, or clear them.' : 'Governance acts of this tenant are recorded here.'}
          />
        ) : (
          <p className="muted">
            No matching events on this page{nextCursor ? ': older ones may match' : ''}.
          </p>
        )
      ) : (
        <div className="table-wrap">
          <table className="data-table audit-table">
            <caption className="visually-hidden">Audit events, newest first</caption>
            <thead>
              <tr>
                <th scope="col" className="num">
                  Seq
                </th>
                <th scope="col">Time</th>
                <th scope="col">Type</th>
                <th scope="col">Severity</th>
                <th scope="col">Actor</th>
                <th scope="col">Job or run</th>
                <th scope="col">Reason</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((event) => (
                <EventRow key={`${event.seq}-${event.hash}`} event={event} />
              ))}
            </tbody>
          </table>
        </div>
      )}
      {hidden > 0 && (
        <p className="muted">
          {hidden} read{hidden === 1 ? '' : 's'} of the log itself hidden on this page.
        </p>
      )}
      {pager}
    </>
  );
}

/** The tenant's audit chain: its events, filtered and followed live, its check and its legal hold. */
export function AuditPage() {
  const [params, setParams] = useSearchParams();
  const filters = filtersFrom(params);
  const tail = params.get('tail') === '1';
  const showReads = params.get('reads') === '1';
  const me = useMe();
  const { can } = useCapabilities();
  const tailId = useId();
  const readsId = useId();
  const whyNotId = useId();

  const checking = me.isPending;
  // Without an answer from /me the gateway decides: the read is tried.
  const read = me.isError ? { allowed: true, reason: '' } : can('audit.read');
  const hold = me.isError ? { allowed: true, reason: '' } : can('audit.hold');
  const verify = useAuditVerify(!checking && read.allowed);

  function update(next: AuditFilters, flags: { tail: boolean; reads: boolean }) {
    const search = filtersToParams(next);
    if (flags.tail) search.set('tail', '1');
    if (flags.reads) search.set('reads', '1');
    setParams(search);
  }

  if (checking) {
    return (
      <Page title="Audit log">
        <Loading label="Checking what the signed-in key may do…" />
      </Page>
    );
  }
  if (!read.allowed) {
    return (
      <Page title="Audit log">
        <EmptyState title="The audit log is not available to this key">
          <Unavailable id={whyNotId} reason={read.reason} />
        </EmptyState>
      </Page>
    );
  }

  const key = filtersToParams(filters).toString();
  return (
    <Page title="Audit log">
      <div className="audit-panels">
        <VerifyPanel verify={verify} />
        <HoldPanel enabled may={hold} />
      </div>
      <section className="audit-events" aria-labelledby={`${tailId}-heading`}>
        <h2 id={`${tailId}-heading`}>Events</h2>
        <Filters key={`filters:${key}`} filters={filters} onChange={(next) => update(next, { tail, reads: showReads })} />
        <div className="audit-toggles">
          <div className="toggle">
            <input
              id={tailId}
              type="checkbox"
              checked={tail}
              onChange={(e) => update(filters, { tail: e.target.checked, reads: showReads })}
            />
            <label htmlFor={tailId}>Live tail</label>
          </div>
          <div className="toggle">
            <input
              id={readsId}
              type="checkbox"
              checked={showReads}
              onChange={(e) => update(filters, { tail, reads: e.target.checked })}
            />
            <label htmlFor={readsId}>Show reads of the log (audit.read, audit.verify)</label>
          </div>
          {tail && (
            <span className="badge badge-success tail-badge">
              <span className="badge-glyph" aria-hidden="true">
                ●
              </span>
              <span>Following new events</span>
            </span>
          )}
        </div>
        {/* A change of filters starts again from the newest page. */}
        <Events key={`events:${key}`} filters={filters} tail={tail} showReads={showReads} />
      </section>
    </Page>
  );
}
