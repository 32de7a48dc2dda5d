import { useParams, Link } from 'react-router';

import {
  ConfirmButton,
  EmptyState,
  ErrorState,
  formatTime,
  JsonView,
  Loading,
  Page,
  StatusBadge,
} from '@/components';
import { describeError } from '@/lib/api';

import { useCancelJob, useJob, useJobDecisions } from '../api';
import { jobTimeline } from '../timeline';
import { isTerminal, type JobDetail, type SafetyDecision } from '../types';
import { JobOutput } from './JobOutput';

function CancelJob({ job }: { job: JobDetail }) {
  const cancel = useCancelJob(job.id ?? '');
  return (
    <>
      <ConfirmButton
        onConfirm={() => cancel.mutate()}
        disabled={cancel.isPending}
        question={`Cancel job ${job.id}? A worker running it is told to stop.`}
        confirmLabel="Yes, cancel job"
      >
        Cancel job
      </ConfirmButton>
      {cancel.isError && (
        <p className="form-error" role="alert">
          {describeError(cancel.error)}
        </p>
      )}
    </>
  );
}

function Facts({ job }: { job: JobDetail }) {
  const rows: [string, React.ReactNode][] = [
    ['State', <StatusBadge key="s" status={job.state ?? ''} />],
    ['Topic', job.topic],
    ['Tenant', job.tenant],
    [
      'Trace ID',
      job.trace_id ? (
        <Link key="t" className="mono" to={`/traces/${encodeURIComponent(job.trace_id)}`}>
          {job.trace_id}
        </Link>
      ) : (
        ''
      ),
    ],
    ['Created', formatTime(job.created_at)],
    ['Updated', formatTime(job.updated_at)],
    ['Worker', job.worker_id],
    ['Attempts', job.attempts !== undefined ? String(job.attempts) : ''],
    ['Error', job.error ?? ''],
  ];
  if (job.run_id) {
    rows.push([
      'Workflow run',
      <Link key="r" to={`/runs/${encodeURIComponent(job.run_id)}`}>
        {job.run_id}
      </Link>,
    ]);
  }
  return (
    <dl className="facts">
      {rows
        .filter(([, value]) => value !== '' && value !== undefined && value !== null)
        .map(([name, value]) => (
          <div key={name} className="facts-row">
            <dt>{name}</dt>
            <dd>{value}</dd>
          </div>
        ))}
    </dl>
  );
}

function Timeline({ job, decisions }: { job: JobDetail; decisions: SafetyDecision[] }) {
  const entries = jobTimeline(job, decisions);
  if (entries.length === 0) return <EmptyState title="Nothing recorded yet" />;
  return (
    <ol className="timeline">
      {entries.map((entry, i) => (
        <li key={`${entry.at}-${i}`}>
          <time dateTime={entry.at}>{formatTime(entry.at)}</time> <strong>{entry.what}</strong>
          {entry.detail && <span className="muted"> · {entry.detail}</span>}
        </li>
      ))}
    </ol>
  );
}

function Decisions({ id }: { id: string }) {
  const decisions = useJobDecisions(id);
  if (decisions.isPending) return <Loading label="Loading decisions…" />;
  if (decisions.isError) return <ErrorState error={decisions.error} retry={() => void decisions.refetch()} />;
  if (decisions.data.length === 0) return <EmptyState title="No safety decisions recorded" />;
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">Safety decisions</caption>
        <thead>
          <tr>
            <th scope="col">Action</th>
            <th scope="col">Rule</th>
            <th scope="col">Reason</th>
            <th scope="col">Evaluated</th>
          </tr>
        </thead>
        <tbody>
          {decisions.data.map((d, i) => (
            <tr key={`${d.evaluated_at}-${i}`}>
              <td>
                <StatusBadge status={d.action ?? ''} />
              </td>
              <td className="cell-id">{d.rule_id}</td>
              <td>
                {d.reason}
                {d.constraints && Object.keys(d.constraints).length > 0 && (
                  <JsonView value={d.constraints} label="Constraints" />
                )}
              </td>
              <td>{formatTime(d.evaluated_at)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function Section({ id, title, children }: { id: string; title: string; children: React.ReactNode }) {
  return (
    <section aria-labelledby={id}>
      <h2 id={id}>{title}</h2>
      {children}
    </section>
  );
}

/** One job: its state, what happened to it, the policy's decisions, its input and output. */
export function JobDetailPage() {
  const id = useParams().id ?? '';
  const job = useJob(id);
  const decisions = useJobDecisions(id);
  const title = `Job ${id}`;

  if (job.isPending) {
    return (
      <Page title={title}>
        <Loading label="Loading the job…" />
      </Page>
    );
  }
  if (job.isError) {
    return (
      <Page title={title}>
        <ErrorState error={job.error} retry={() => void job.refetch()} />
        <p>
          <Link to="/jobs">Back to jobs</Link>
        </p>
      </Page>
    );
  }
  const data = job.data;
  const hasInput = Boolean(data.prompt) || (data.labels && Object.keys(data.labels).length > 0);
  return (
    <Page title={title} actions={isTerminal(data.state) ? undefined : <CancelJob job={data} />}>
      <Facts job={data} />
      <Section id="job-timeline" title="Timeline">
        <Timeline job={data} decisions={decisions.data ?? []} />
      </Section>
      <Section id="job-decisions" title="Safety decisions">
        <Decisions id={id} />
      </Section>
      <Section id="job-input" title="Input">
        {hasInput ? (
          <>
            {data.prompt && <JsonView value={data.prompt} label="Prompt" />}
            {data.labels && Object.keys(data.labels).length > 0 && <JsonView value={data.labels} label="Labels" />}
          </>
        ) : (
          <p className="muted">The job&apos;s input is not kept any more, or it had none.</p>
        )}
      </Section>
      <Section id="job-output" title="Output">
        <JobOutput job={data} />
      </Section>
    </Page>
  );
}
