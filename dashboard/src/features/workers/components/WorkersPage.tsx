import { useId } from 'react';

import { EmptyState, ErrorState, formatAge, formatTime, Loading, Page, StatusBadge } from '@/components';

import { byPool, percent, useWorkers, type Pool } from '../api';

function PoolSection({ pool }: { pool: Pool }) {
  const headingId = useId();
  return (
    <section aria-labelledby={headingId} className="pool">
      <h2 id={headingId}>Pool {pool.name}</h2>
      <p className="muted">
        {pool.online} of {pool.workers.length} online · {pool.activeJobs} active jobs
        {pool.capacity ? ` of ${pool.capacity} slots` : ''}
      </p>
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Workers of pool {pool.name}</caption>
          <thead>
            <tr>
              <th scope="col">Worker</th>
              <th scope="col">Status</th>
              <th scope="col" className="num">
                Active jobs
              </th>
              <th scope="col" className="num">
                CPU
              </th>
              <th scope="col" className="num">
                Memory
              </th>
              <th scope="col">Capabilities</th>
              <th scope="col">Last heartbeat</th>
            </tr>
          </thead>
          <tbody>
            {pool.workers.map((w) => (
              <tr key={w.worker_id}>
                <th scope="row" className="cell-id">
                  {w.worker_id}
                </th>
                <td>
                  <StatusBadge status={w.online === false ? 'offline' : 'online'} />
                </td>
                <td className="num">
                  {w.active_jobs ?? 0}
                  {w.max_parallel_jobs ? ` / ${w.max_parallel_jobs}` : ''}
                </td>
                <td className="num">{percent(w.cpu_load)}</td>
                <td className="num">{percent(w.memory_load)}</td>
                <td>{(w.capabilities ?? []).join(', ')}</td>
                <td>
                  {w.last_heartbeat ? (
                    <>
                      <time dateTime={w.last_heartbeat}>{formatTime(w.last_heartbeat)}</time>
                      {w.heartbeat_age_seconds !== undefined && (
                        <span className="muted"> ({formatAge(w.heartbeat_age_seconds)} ago)</span>
                      )}
                    </>
                  ) : (
                    'never'
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}

/** The workers the registry knows, by pool, with their load and last heartbeat. */
export function WorkersPage() {
  const workers = useWorkers();
  let body;
  if (workers.isPending) body = <Loading label="Loading workers…" />;
  else if (workers.isError) body = <ErrorState error={workers.error} retry={() => void workers.refetch()} />;
  else if (workers.data.length === 0) {
    body = <EmptyState title="No workers" description="Workers appear here once they send a heartbeat." />;
  } else {
    body = byPool(workers.data).map((pool) => <PoolSection key={pool.name} pool={pool} />);
  }
  return <Page title="Workers">{body}</Page>;
}
