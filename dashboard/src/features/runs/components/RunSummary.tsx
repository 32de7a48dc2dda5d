import { Link } from 'react-router';

import { formatTime, StatusBadge } from '@/components';

import type { RunDetail } from '../types';

function runError(run: RunDetail): string {
  const e = run.error;
  if (!e) return '';
  const parts = [e.code, e.message, e.step_id ? `step ${String(e.step_id)}` : '']
    .filter((p) => typeof p === 'string' && p);
  return parts.length > 0 ? parts.join(' · ') : JSON.stringify(e);
}

/** The run's facts: status, definition, times, who started it, where it came from. */
export function RunSummary({ run }: { run: RunDetail }) {
  const timer = run.timers?.[0];
  const error = runError(run);
  return (
    <dl className="runs-facts">
      <div>
        <dt>Status</dt>
        <dd>
          <StatusBadge status={run.status ?? 'pending'} />
          {run.dry_run && <span className="runs-tag">dry run</span>}
        </dd>
      </div>
      {run.workflow_id && (
        <div>
          <dt>Workflow</dt>
          <dd>
            <Link to={`/workflows/${encodeURIComponent(run.workflow_id)}`}>{run.workflow_id}</Link>
          </dd>
        </div>
      )}
      <div>
        <dt>Started</dt>
        <dd>{formatTime(run.started_at) || '—'}</dd>
      </div>
      <div>
        <dt>Completed</dt>
        <dd>{formatTime(run.completed_at) || '—'}</dd>
      </div>
      {(run.created_by || run.triggered_by) && (
        <div>
          <dt>Started by</dt>
          <dd>{run.created_by || run.triggered_by}</dd>
        </div>
      )}
      {run.rerun_of && (
        <div>
          <dt>Rerun of</dt>
          <dd>
            <Link to={`/runs/${encodeURIComponent(run.rerun_of)}`}>{run.rerun_of}</Link>
            {run.rerun_step && <> from step <span className="runs-mono">{run.rerun_step}</span></>}
          </dd>
        </div>
      )}
      {timer?.fires_at && (
        <div>
          <dt>Next wake-up</dt>
          <dd>{formatTime(timer.fires_at)}</dd>
        </div>
      )}
      {error && (
        <div>
          <dt>Error</dt>
          <dd className="runs-error-text">{error}</dd>
        </div>
      )}
    </dl>
  );
}
