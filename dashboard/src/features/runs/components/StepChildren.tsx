import { Link } from 'react-router';

import { StatusBadge } from '@/components';

import { awaitsApproval, orderedChildren } from '../status';
import type { Definition, RunDetail, StepRun } from '../types';

function errorOf(step: StepRun): string {
  const e = step.error;
  if (!e) return '';
  return [e.code, e.message].filter((part) => typeof part === 'string' && part).join(': ');
}

function ChildTable({ stepId, noun, step }: { stepId: string; noun: string; step: StepRun }) {
  const children = orderedChildren(step);
  const headingId = `run-children-${stepId}`;
  return (
    <section className="runs-children" aria-labelledby={headingId}>
      <h3 id={headingId}>
        {stepId}: {children.length} {noun}
        {children.length === 1 ? '' : 's'}
      </h3>
      {children.length === 0 ? (
        <p className="runs-muted">No {noun}s{Array.isArray(step.resolved_items) ? ' (the list was empty)' : ' yet'}.</p>
      ) : (
        <div className="runs-table-wrap">
          <table className="runs-table">
            <thead>
              <tr>
                <th scope="col">{noun === 'iteration' ? 'Iteration' : 'Item'}</th>
                <th scope="col">Status</th>
                <th scope="col">Attempts</th>
                <th scope="col">Job</th>
                <th scope="col">Error</th>
              </tr>
            </thead>
            <tbody>
              {children.map(([childId, child]) => (
                <tr key={childId} data-testid={`child-${childId}`} data-status={(child.status ?? 'pending').toLowerCase()}>
                  <td className="runs-mono">{childId}</td>
                  <td>
                    <StatusBadge status={(child.status ?? 'pending').toLowerCase()} />
                    {awaitsApproval(child) && (
                      <>
                        {' '}
                        <Link to="/approvals">Waiting for approval</Link>
                      </>
                    )}
                  </td>
                  <td>{child.attempts ?? 0}</td>
                  <td className="runs-mono">{child.job_id ?? ''}</td>
                  <td>{errorOf(child)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

/** The for_each items and loop iterations of a run's steps, one table per step. */
export function StepChildren({ run, definition }: { run: RunDetail; definition?: Definition | null }) {
  const withChildren = Object.entries(run.steps ?? {}).filter(
    ([, step]) => step.children || Array.isArray(step.resolved_items),
  );
  if (withChildren.length === 0) {
    return <p className="runs-muted">No step of this run fans out.</p>;
  }
  return (
    <>
      {withChildren.map(([stepId, step]) => {
        const kind = (definition?.steps?.[stepId]?.type ?? '').toLowerCase();
        return <ChildTable key={stepId} stepId={stepId} step={step} noun={kind === 'loop' ? 'iteration' : 'item'} />;
      })}
    </>
  );
}
