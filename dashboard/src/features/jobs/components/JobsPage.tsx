import { useId, useState, type FormEvent } from 'react';
import { Link, useSearchParams } from 'react-router';

import { EmptyState, ErrorState, formatTime, Loading, Page, Pager, StatusBadge, useCursorPages } from '@/components';

import { useJobs } from '../api';
import { JOB_STATES, type JobFilters } from '../types';

function Filters({ filters, onChange }: { filters: JobFilters; onChange: (next: JobFilters) => void }) {
  const stateId = useId();
  const topicId = useId();
  const [topic, setTopic] = useState(filters.topic);

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    onChange({ ...filters, topic: topic.trim() });
  }

  return (
    <form className="filters" onSubmit={submit} aria-label="Filter jobs">
      <div className="field">
        <label htmlFor={stateId}>State</label>
        <select id={stateId} value={filters.state} onChange={(e) => onChange({ ...filters, state: e.target.value })}>
          <option value="">Any state</option>
          {JOB_STATES.map((state) => (
            <option key={state} value={state}>
              {state}
            </option>
          ))}
        </select>
      </div>
      <div className="field">
        <label htmlFor={topicId}>Topic</label>
        <input
          id={topicId}
          type="search"
          value={topic}
          placeholder="job.echo"
          onChange={(e) => setTopic(e.target.value)}
        />
      </div>
      <button type="submit">Apply filters</button>
      {(filters.state || filters.topic) && (
        <button
          type="button"
          onClick={() => {
            setTopic('');
            onChange({ state: '', topic: '' });
          }}
        >
          Clear filters
        </button>
      )}
    </form>
  );
}

function JobTable({ filters }: { filters: JobFilters }) {
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const jobs = useJobs(filters, cursor);

  if (jobs.isPending) return <Loading label="Loading jobs…" />;
  if (jobs.isError) return <ErrorState error={jobs.error} retry={() => void jobs.refetch()} />;
  const { items, nextCursor } = jobs.data;
  const filtered = Boolean(filters.state || filters.topic);
  if (items.length === 0 && onFirstPage) {
    return (
      <EmptyState
        title={filtered ? 'No jobs match these filters' : 'No jobs yet'}
        description={
          filtered ? 'Try another state or topic, or clear the filters.' : 'Jobs show up here once they are submitted.'
        }
      />
    );
  }
  return (
    <>
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Jobs, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Job ID</th>
              <th scope="col">Topic</th>
              <th scope="col">State</th>
              <th scope="col">Updated</th>
            </tr>
          </thead>
          <tbody>
            {items.map((job) => (
              <tr key={job.id}>
                <td className="cell-id">
                  <Link to={`/jobs/${encodeURIComponent(job.id ?? '')}`}>{job.id}</Link>
                </td>
                <td>{job.topic}</td>
                <td>
                  <StatusBadge status={job.state ?? ''} />
                </td>
                <td>{formatTime(job.updated_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      {items.length === 0 && <p className="muted">This page is empty.</p>}
      <Pager {...pagerProps(nextCursor)} />
    </>
  );
}

/** Every job of the tenant, newest first, by state and topic. */
export function JobsPage() {
  const [params, setParams] = useSearchParams();
  const filters: JobFilters = { state: params.get('state') ?? '', topic: params.get('topic') ?? '' };

  function change(next: JobFilters) {
    const search = new URLSearchParams();
    if (next.state) search.set('state', next.state);
    if (next.topic) search.set('topic', next.topic);
    setParams(search);
  }

  return (
    <Page title="Jobs">
      <Filters key={`filters:${filters.state}|${filters.topic}`} filters={filters} onChange={change} />
      {/* A change of filters starts again from the first page. */}
      <JobTable key={`table:${filters.state}|${filters.topic}`} filters={filters} />
    </Page>
  );
}
