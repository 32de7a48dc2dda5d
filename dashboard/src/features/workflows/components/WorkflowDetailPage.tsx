import '../workflows.css';

import { Link, useParams } from 'react-router';

import { EmptyState, ErrorState, formatTime, Loading, Page, StatusBadge } from '@/components';

import { useRecentRuns, useWorkflow } from '../api';
import type { WorkflowDefinition } from '../types';

import { StartRunForm } from './StartRunForm';
import { StepTable } from './StepTable';

function Facts({ wf }: { wf: WorkflowDefinition }) {
  return (
    <dl className="wf-facts">
      <div>
        <dt>ID</dt>
        <dd className="wf-mono">{wf.id}</dd>
      </div>
      {wf.version && (
        <div>
          <dt>Version</dt>
          <dd>{wf.version}</dd>
        </div>
      )}
      {typeof wf.timeout_sec === 'number' && wf.timeout_sec > 0 && (
        <div>
          <dt>Timeout</dt>
          <dd>{wf.timeout_sec} s</dd>
        </div>
      )}
      {wf.created_by && (
        <div>
          <dt>Saved by</dt>
          <dd>{wf.created_by}</dd>
        </div>
      )}
      {(wf.updated_at || wf.created_at) && (
        <div>
          <dt>Updated</dt>
          <dd>{formatTime(wf.updated_at || wf.created_at)}</dd>
        </div>
      )}
    </dl>
  );
}

function RecentRuns({ workflowId }: { workflowId: string }) {
  const runs = useRecentRuns(workflowId);
  const all = `/runs?workflow_id=${encodeURIComponent(workflowId)}`;
  let body;
  if (runs.isPending) body = <Loading />;
  else if (runs.isError) body = <ErrorState error={runs.error} retry={() => void runs.refetch()} />;
  else if (runs.data.length === 0) body = <EmptyState title="No runs yet" description="Start one with the form above." />;
  else {
    body = (
      <div className="wf-table-wrap">
        <table className="wf-table">
          <thead>
            <tr>
              <th scope="col">Run</th>
              <th scope="col">Status</th>
              <th scope="col">Started</th>
            </tr>
          </thead>
          <tbody>
            {runs.data.map((run) => (
              <tr key={run.id}>
                <td className="wf-mono">
                  <Link to={`/runs/${encodeURIComponent(run.id ?? '')}`}>{run.id}</Link>
                </td>
                <td>
                  <StatusBadge status={run.status ?? 'pending'} />
                </td>
                <td>{formatTime(run.started_at)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    );
  }
  return (
    <section className="wf-section" aria-labelledby="wf-runs-heading">
      <h2 id="wf-runs-heading">Recent runs</h2>
      {body}
      <p>
        <Link to={all}>All runs of this workflow</Link>
      </p>
    </section>
  );
}

/** A definition: what it is, its steps, a form to start a run, and its latest runs. */
export function WorkflowDetailPage() {
  const { id = '' } = useParams();
  const wf = useWorkflow(id);

  if (wf.isPending) {
    return (
      <Page title={`Workflow ${id}`}>
        <Loading />
      </Page>
    );
  }
  if (wf.isError) {
    return (
      <Page title={`Workflow ${id}`}>
        <ErrorState error={wf.error} retry={() => void wf.refetch()} />
      </Page>
    );
  }
  const definition = wf.data;
  const schemaKey = JSON.stringify(definition.input_schema ?? null);
  return (
    <Page title={definition.name || definition.id || id}>
      {definition.description && <p className="wf-description">{definition.description}</p>}
      <Facts wf={definition} />

      <section className="wf-section" aria-labelledby="wf-steps-heading">
        <h2 id="wf-steps-heading">Steps</h2>
        <StepTable steps={definition.steps ?? {}} />
      </section>

      <section className="wf-section">
        <StartRunForm key={schemaKey} workflowId={definition.id || id} inputSchema={definition.input_schema} />
      </section>

      <RecentRuns workflowId={definition.id || id} />
    </Page>
  );
}
