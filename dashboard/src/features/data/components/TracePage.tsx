import { useId, useState, type FormEvent } from 'react';
import { Link, useNavigate, useParams } from 'react-router';

import { EmptyState, ErrorState, formatTime, Loading, Page, StatusBadge, toneOf } from '@/components';
import { ApiError } from '@/lib/api';

import '../data.css';
import { useTrace, type Trace, type TraceJob } from '../api';
import { formatDuration, formatOffset } from '../format';
import { axisTicks, jobSpan, traceLayout } from '../traceLayout';

function OpenTrace({ current }: { current: string }) {
  const navigate = useNavigate();
  const inputId = useId();
  const [value, setValue] = useState(current);

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    const id = value.trim();
    if (id) void navigate(`/traces/${encodeURIComponent(id)}`);
  }

  return (
    <form className="filters" onSubmit={submit} aria-label="Open a trace">
      <div className="field">
        <label htmlFor={inputId}>Trace ID</label>
        <input
          id={inputId}
          className="mono trace-input"
          value={value}
          required
          maxLength={256}
          onChange={(e) => setValue(e.target.value)}
        />
      </div>
      <button type="submit">Open trace</button>
    </form>
  );
}

function jobLink(id: string | undefined) {
  return `/jobs/${encodeURIComponent(id ?? '')}`;
}

/** Every job on one time axis: a bar from its creation to its end, labelled in words. */
function TraceTimeline({ jobs }: { jobs: TraceJob[] }) {
  const layout = traceLayout(jobs);
  const ticks = axisTicks(layout.span);
  return (
    <figure className="trace-timeline" aria-labelledby="trace-timeline-caption">
      <figcaption id="trace-timeline-caption" className="muted">
        {layout.start > 0 ? `From ${formatTime(new Date(layout.start).toISOString())}, over ${formatDuration(layout.span)}. ` : ''}
        Each bar runs from a job&apos;s creation to its end (or its last update while it runs).
      </figcaption>
      <div className="trace-row trace-axis" aria-hidden="true">
        <span />
        <svg className="trace-track" width="100%" height="20" preserveAspectRatio="none">
          {ticks.map((tick, i) => (
            <text
              key={tick.at}
              x={`${tick.at}%`}
              y="14"
              textAnchor={i === 0 ? 'start' : i === ticks.length - 1 ? 'end' : 'middle'}
              className="trace-tick"
            >
              {formatOffset(tick.offset)}
            </text>
          ))}
        </svg>
      </div>
      <ol className="trace-bars">
        {layout.bars.map(({ job, left, width, start, end }) => (
          <li key={job.id} className="trace-row">
            <Link to={jobLink(job.id)} className="trace-label">
              <span className="trace-topic">{job.topic || 'no topic'}</span>{' '}
              <span className="trace-state">{job.state || 'unknown'}</span>
              <span className="visually-hidden">
                {`, job ${job.id}`}
                {Number.isFinite(start) ? `, from ${formatOffset(start - layout.start)} for ${formatDuration(end - start)}` : ''}
              </span>
            </Link>
            <svg className="trace-track" width="100%" height="20" aria-hidden="true" preserveAspectRatio="none">
              <line x1="0" x2="100%" y1="10" y2="10" className="trace-guide" />
              <rect
                x={`${left}%`}
                width={`${width}%`}
                y="3"
                height="14"
                rx="3"
                className={`trace-bar trace-bar-${toneOf(job.state ?? '')}`}
              >
                <title>{`${job.id}: ${formatDuration(end - start)}`}</title>
              </rect>
            </svg>
          </li>
        ))}
      </ol>
    </figure>
  );
}

function TraceTable({ jobs }: { jobs: TraceJob[] }) {
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">Jobs of the trace, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Job</th>
            <th scope="col">Topic</th>
            <th scope="col">State</th>
            <th scope="col">Start</th>
            <th scope="col">End</th>
            <th scope="col">Duration</th>
          </tr>
        </thead>
        <tbody>
          {jobs.map((job) => {
            const { start, end } = jobSpan(job);
            const endAt = job.completed_at ?? job.updated_at ?? '';
            return (
              <tr key={job.id}>
                <td className="cell-id">
                  <Link to={jobLink(job.id)}>{job.id}</Link>
                </td>
                <td>{job.topic}</td>
                <td>
                  <StatusBadge status={job.state ?? ''} />
                </td>
                <td>{formatTime(job.created_at)}</td>
                <td>{formatTime(endAt)}</td>
                <td>{Number.isFinite(start) && Number.isFinite(end) ? formatDuration(end - start) : ''}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function MoreNotice({ trace }: { trace: Trace }) {
  if (!trace.hasMore) return null;
  const total = trace.total !== null ? `${trace.total} jobs` : 'more jobs than are shown';
  return (
    <p className="notice notice-warning" role="note">
      This trace holds {total}; only the newest {trace.jobs.length} are shown here. The API pages through all of
      them with <code>GET /api/v1/jobs?trace_id=…</code>.
    </p>
  );
}

function TraceView({ id }: { id: string }) {
  const trace = useTrace(id);
  if (trace.isPending) return <Loading label="Loading the trace…" />;
  if (trace.isError) {
    if (trace.error instanceof ApiError && trace.error.status === 404) {
      return (
        <EmptyState
          title="No jobs in this trace"
          description="None of this tenant's jobs carry this trace ID: it is unknown, or its jobs have expired."
        />
      );
    }
    return <ErrorState error={trace.error} retry={() => void trace.refetch()} />;
  }
  const { jobs } = trace.data;
  if (jobs.length === 0) return <EmptyState title="No jobs in this trace" />;
  return (
    <>
      <MoreNotice trace={trace.data} />
      <section aria-labelledby="trace-timeline-heading">
        <h2 id="trace-timeline-heading">Timeline</h2>
        <TraceTimeline jobs={jobs} />
      </section>
      <section aria-labelledby="trace-jobs-heading">
        <h2 id="trace-jobs-heading">Jobs ({jobs.length})</h2>
        <TraceTable jobs={jobs} />
      </section>
    </>
  );
}

/** The jobs of one trace on a shared time axis, or a form to open a trace by its id. */
export function TracePage() {
  const id = useParams().id ?? '';
  return (
    <Page title={id ? `Trace ${id}` : 'Traces'}>
      <OpenTrace key={id} current={id} />
      {id ? (
        <TraceView id={id} />
      ) : (
        <EmptyState
          title="Open a trace"
          description="Enter a trace ID to see every job of that trace on one timeline. A job's detail page links to its trace."
        />
      )}
    </Page>
  );
}
