import { useId, type ReactNode } from 'react';
import { Link } from 'react-router';

import { EmptyState, ErrorState, formatAge, Loading, Page, StatusBadge } from '@/components';
import { useEventRate, useLiveState } from '@/lib/live';

import { SAMPLE_SIZE, useJobStates, useStatus, type Status } from '../api';
import '../overview.css';

function Panel({ title, children }: { title: string; children: ReactNode }) {
  const id = useId();
  return (
    <section className="card panel" aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {children}
    </section>
  );
}

const LIVE_WORDS = { live: 'live', connecting: 'connecting', reconnecting: 'reconnecting', polling: 'polling' };

function Health({ status }: { status: Status }) {
  const live = useLiveState();
  const version = status.build?.version ? `version ${status.build.version}` : '';
  const rows: [string, string, string][] = [
    ['Gateway', 'ok', version],
    ['Redis', status.redis?.connected ? 'connected' : 'disconnected', status.redis?.url ?? ''],
    ['NATS', status.nats?.connected ? 'connected' : 'disconnected', status.nats?.url ?? ''],
    ['Live stream', LIVE_WORDS[live], live === 'polling' ? 'pages refresh by polling' : ''],
  ];
  return (
    <table className="data-table">
      <caption className="visually-hidden">Health of each part</caption>
      <thead>
        <tr>
          <th scope="col">Part</th>
          <th scope="col">State</th>
          <th scope="col">Details</th>
        </tr>
      </thead>
      <tbody>
        {rows.map(([part, state, details]) => (
          <tr key={part}>
            <th scope="row">{part}</th>
            <td>
              <StatusBadge status={state} />
            </td>
            <td className="mono">{details}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Breakers({ status }: { status: Status }) {
  const breakers = Object.entries(status.circuit_breakers ?? {});
  if (breakers.length === 0) {
    return <p className="muted">Breaker states are shown to admin keys only.</p>;
  }
  return (
    <>
    {status.input_fail_open_total !== undefined && (
      <p className="muted">Jobs let through while the policy check was down: {status.input_fail_open_total}</p>
    )}
    <table className="data-table">
      <caption className="visually-hidden">Circuit breakers of the safety kernel</caption>
      <thead>
        <tr>
          <th scope="col">Breaker</th>
          <th scope="col">State</th>
          <th scope="col" className="num">
            Failures
          </th>
        </tr>
      </thead>
      <tbody>
        {breakers.map(([name, b]) => (
          <tr key={name}>
            <th scope="row">{name}</th>
            <td>
              <StatusBadge status={b.state ?? 'UNKNOWN'} />
              {b.cooldown_remaining_ms ? (
                <span className="muted"> (retry in {formatAge(b.cooldown_remaining_ms / 1000)})</span>
              ) : null}
            </td>
            <td className="num">
              {b.failures ?? 0}
              {b.fail_threshold ? ` / ${b.fail_threshold}` : ''}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
    </>
  );
}

function JobStates() {
  const states = useJobStates();
  if (states.isPending) return <Loading label="Counting jobs…" />;
  if (states.isError) return <ErrorState error={states.error} retry={() => void states.refetch()} />;
  if (states.data.sampled === 0) return <EmptyState title="No jobs yet" />;
  return (
    <>
      <p className="muted">
        {states.data.more ? `The newest ${SAMPLE_SIZE} jobs` : `All ${states.data.sampled} jobs`}, by state.
      </p>
      <table className="data-table">
        <caption className="visually-hidden">Jobs by state</caption>
        <thead>
          <tr>
            <th scope="col">State</th>
            <th scope="col" className="num">
              Jobs
            </th>
          </tr>
        </thead>
        <tbody>
          {states.data.counts.map(([state, count]) => (
            <tr key={state}>
              <th scope="row">
                <Link to={`/jobs?state=${encodeURIComponent(state)}`}>{state}</Link>
              </th>
              <td className="num">{count}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  );
}

function EventRate() {
  const rate = useEventRate();
  const live = useLiveState();
  return (
    <p className="big-figure">
      <span className="figure">{rate.toFixed(1)}</span> events per second
      <span className="muted"> over the last 10 s{live === 'live' ? '' : ' (the stream is not live)'}</span>
    </p>
  );
}

/** The state of the control plane at a glance. */
export function OverviewPage() {
  const status = useStatus();
  return (
    <Page title="Overview">
      <div className="panels">
        <Panel title="Health">
          {status.isPending ? (
            <Loading label="Asking the gateway…" />
          ) : status.isError ? (
            <ErrorState error={status.error} retry={() => void status.refetch()} />
          ) : (
            <Health status={status.data} />
          )}
        </Panel>
        <Panel title="Workers">
          {status.isPending ? (
            <Loading />
          ) : status.isError ? (
            <p className="muted">Unknown while the status cannot be read.</p>
          ) : (
            <p className="big-figure">
              <span className="figure">{status.data.workers ?? 0}</span> online{' '}
              <Link to="/workers">See the workers</Link>
            </p>
          )}
        </Panel>
        <Panel title="Live events">
          <EventRate />
        </Panel>
        <Panel title="Circuit breakers">
          {status.isPending ? <Loading /> : status.isError ? <p className="muted">Unknown.</p> : <Breakers status={status.data} />}
        </Panel>
        <Panel title="Jobs by state">
          <JobStates />
        </Panel>
      </div>
      {status.data?.uptime_seconds !== undefined && (
        <p className="muted">The gateway answering has been up {formatAge(status.data.uptime_seconds)}.</p>
      )}
    </Page>
  );
}
