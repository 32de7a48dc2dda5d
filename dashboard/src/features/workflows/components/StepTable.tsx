import type { WorkflowStep } from '../types';

/** What a step does beyond its kind, in a few words. */
function details(step: WorkflowStep): string[] {
  const out: string[] = [];
  if (step.topic) out.push(`topic ${step.topic}`);
  if (step.for_each) {
    out.push(`for each ${step.for_each}${step.max_parallel ? `, ${step.max_parallel} at a time` : ''}`);
  }
  if (step.condition) out.push(`if ${step.condition}`);
  if (step.policy_gate) out.push(`policy gate: ${step.policy_gate.replace(/_/g, ' ')}`);
  if (typeof step.delay_sec === 'number' && step.delay_sec > 0) out.push(`waits ${step.delay_sec} s`);
  if (typeof step.timeout_sec === 'number' && step.timeout_sec > 0) out.push(`timeout ${step.timeout_sec} s`);
  if (step.on_error) out.push(`on error: ${step.on_error}`);
  return out;
}

/** A definition's steps in its own order. */
export function StepTable({ steps }: { steps: Record<string, WorkflowStep> }) {
  const entries = Object.entries(steps);
  if (entries.length === 0) return <p className="wf-muted">This definition has no steps.</p>;
  return (
    <div className="wf-table-wrap">
      <table className="wf-table">
        <thead>
          <tr>
            <th scope="col">Step</th>
            <th scope="col">Type</th>
            <th scope="col">Depends on</th>
            <th scope="col">Details</th>
          </tr>
        </thead>
        <tbody>
          {entries.map(([stepId, step]) => (
            <tr key={stepId}>
              <td>
                <span className="wf-mono">{stepId}</span>
                {step.name && step.name !== stepId && <div className="wf-muted">{step.name}</div>}
              </td>
              <td>{step.type || 'worker'}</td>
              <td className="wf-mono">{(step.depends_on ?? []).join(', ') || '—'}</td>
              <td>
                {details(step).map((line) => (
                  <div key={line}>{line}</div>
                ))}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}
