import '../workflows.css';

import { Link } from 'react-router';

import { EmptyState, ErrorState, Loading, Page } from '@/components';

import { useWorkflows } from '../api';

/** The tenant's workflow definitions. */
export function WorkflowsPage() {
  const workflows = useWorkflows();
  let body;
  if (workflows.isPending) body = <Loading />;
  else if (workflows.isError) {
    body = <ErrorState error={workflows.error} retry={() => void workflows.refetch()} />;
  } else if (workflows.data.length === 0) {
    body = (
      <EmptyState
        title="No workflows yet"
        description="Save a definition with POST /api/v1/workflows and it shows up here."
      />
    );
  } else {
    body = (
      <div className="wf-table-wrap">
        <table className="wf-table">
          <caption className="visually-hidden">Workflow definitions</caption>
          <thead>
            <tr>
              <th scope="col">Workflow</th>
              <th scope="col">Name</th>
              <th scope="col">Steps</th>
              <th scope="col">Version</th>
              <th scope="col">Description</th>
            </tr>
          </thead>
          <tbody>
            {workflows.data.map((wf) => (
              <tr key={wf.id}>
                <td className="wf-mono">
                  <Link to={`/workflows/${encodeURIComponent(wf.id)}`}>{wf.id}</Link>
                </td>
                <td>{wf.name}</td>
                <td>{Object.keys(wf.steps ?? {}).length}</td>
                <td>{wf.version ?? ''}</td>
                <td>{wf.description ?? ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    );
  }
  return <Page title="Workflows">{body}</Page>;
}
