import '../runs.css';

import { useId, useState } from 'react';
import { Link, useSearchParams } from 'react-router';

import { EmptyState, ErrorState, formatTime, Loading, Page, Pager, StatusBadge } from '@/components';

import { useRunList, type RunFilters } from '../api';
import { statusWords } from '../status';
import { RUN_STATUSES } from '../types';

function Filters({ status, workflowId, onChange }: {
  status: string;
  workflowId: string;
  onChange: (next: { status: string; workflowId: string }) => void;
}) {
  const id = useId();
  const [draftWorkflow, setDraftWorkflow] = useState(workflowId);
  return (
    <form
      className="runs-filters"
      role="search"
      aria-label="Filter runs"
      onSubmit={(e) => {
        e.preventDefault();
        onChange({ status, workflowId: draftWorkflow.trim() });
      }}
    >
      <div className="runs-field">
        <label htmlFor={`${id}-status`}>Status</label>
        <select
          id={`${id}-status`}
          value={status}
          onChange={(e) => onChange({ status: e.target.value, workflowId: draftWorkflow.trim() })}
        >
          <option value="">Any status</option>
          {RUN_STATUSES.map((s) => (
            <option key={s} value={s}>
              {statusWords(s)}
            </option>
          ))}
        </select>
      </div>
      <div className="runs-field">
        <label htmlFor={`${id}-workflow`}>Workflow ID</label>
        <input
          id={`${id}-workflow`}
          type="text"
          value={draftWorkflow}
          onChange={(e) => setDraftWorkflow(e.target.value)}
        />
      </div>
      <button type="submit">Apply</button>
    </form>
  );
}

function RunTable({ filters, onNext, onPrevious, onFirst, canGoBack }: {
  filters: RunFilters;
  onNext: (cursor: string) => void;
  onPrevious: () => void;
  onFirst: () => void;
  canGoBack: boolean;
}) {
  const runs = useRunList(filters);
  if (runs.isPending) return <Loading />;
  if (runs.isError) return <ErrorState error={runs.error} retry={() => void runs.refetch()} />;
  const items = runs.data.items ?? [];
  const next = runs.data.next_cursor ?? '';
  const filtered = Boolean(filters.status || filters.workflowId);
  if (items.length === 0 && !canGoBack) {
    return (
      <EmptyState
        title={filtered ? 'No runs match these filters' : 'No runs yet'}
        description={filtered ? 'Try another status or workflow.' : 'Start a run from a workflow\'s page.'}
      />
    );
  }
  return (
    <>
      <div className="runs-table-wrap">
        <table className="runs-table">
          <caption className="visually-hidden">Workflow runs, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Workflow</th>
              <th scope="col">Status</th>
              <th scope="col">Started</th>
              <th scope="col">Completed</th>
              <th scope="col">Started by</th>
            </tr>
          </thead>
          <tbody>
            {items.map((run) => (
              <tr key={run.id}>
                <td className="runs-mono">
                  <Link to={`/runs/${encodeURIComponent(run.id ?? '')}`}>{run.id}</Link>
                  {run.dry_run && <span className="runs-tag">dry run</span>}
                  {run.rerun_of && <span className="runs-tag">rerun</span>}
                </td>
                <td className="runs-mono">
                  {run.workflow_id && (
                    <Link to={`/workflows/${encodeURIComponent(run.workflow_id)}`}>{run.workflow_id}</Link>
                  )}
                </td>
                <td>
                  <StatusBadge status={run.status ?? 'pending'} />
                </td>
                <td>{formatTime(run.started_at)}</td>
                <td>{formatTime(run.completed_at)}</td>
                <td>{run.triggered_by ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager
        hasPrevious={canGoBack}
        hasNext={Boolean(next)}
        onPrevious={onPrevious}
        onFirst={onFirst}
        onNext={() => onNext(next)}
      />
    </>
  );
}

/** Every run of the tenant, newest first, filtered by status and workflow. */
export function RunsPage() {
  const [params, setParams] = useSearchParams();
  const status = params.get('status') ?? '';
  const workflowId = params.get('workflow_id') ?? '';
  // Cursors of the pages before this one; a filter change starts again at the first.
  const [cursors, setCursors] = useState<string[]>([]);
  const filterKey = `${status}|${workflowId}`;
  const [pagedFor, setPagedFor] = useState(filterKey);
  if (pagedFor !== filterKey) {
    setPagedFor(filterKey);
    setCursors([]);
  }

  const change = (next: { status: string; workflowId: string }) => {
    const search = new URLSearchParams();
    if (next.status) search.set('status', next.status);
    if (next.workflowId) search.set('workflow_id', next.workflowId);
    setParams(search);
  };

  return (
    <Page title="Runs">
      <Filters key={workflowId} status={status} workflowId={workflowId} onChange={change} />
      <RunTable
        filters={{ status, workflowId, cursor: cursors[cursors.length - 1] }}
        canGoBack={cursors.length > 0}
        onNext={(cursor) => setCursors((c) => [...c, cursor])}
        onPrevious={() => setCursors((c) => c.slice(0, -1))}
        onFirst={() => setCursors([])}
      />
    </Page>
  );
}
