import { useId, useState } from 'react';
import { Link } from 'react-router';

import { ErrorState, formatTime, JsonView, Loading, StatusBadge } from '@/components';

import { decidable, useApprovalContext, type ApprovalItem, type Decision } from '../api';
import { DecisionForm } from './DecisionForm';

function Context({ jobId }: { jobId: string }) {
  const context = useApprovalContext(jobId, true);
  if (context.isPending) return <Loading label="Loading the context…" />;
  if (context.isError) return <ErrorState error={context.error} retry={() => void context.refetch()} />;
  return <JsonView value={context.data} label="Approval context" />;
}

export type ApprovalCardProps = {
  item: ApprovalItem;
  /** Told after a decision was accepted. */
  onDecided: (jobId: string, decision: Decision) => void;
};

/** One job waiting for a human: what it is, why it is gated, and the decision. */
export function ApprovalCard({ item, onDecided }: ApprovalCardProps) {
  const jobId = item.job?.id ?? '';
  const headingId = useId();
  const [showContext, setShowContext] = useState(false);
  const { may, why } = decidable(item);
  const workflow = item.workflow;

  return (
    <article className="card approval" aria-labelledby={headingId}>
      <h2 id={headingId} className="approval-title">
        Approval for job <span className="mono">{jobId}</span>
      </h2>
      <dl className="facts">
        <div className="facts-row">
          <dt>Topic</dt>
          <dd>{item.job?.topic}</dd>
        </div>
        <div className="facts-row">
          <dt>Job</dt>
          <dd>
            <Link to={`/jobs/${encodeURIComponent(jobId)}`}>{jobId}</Link>
          </dd>
        </div>
        {item.requested_at && (
          <div className="facts-row">
            <dt>Requested</dt>
            <dd>{formatTime(item.requested_at)}</dd>
          </div>
        )}
        <div className="facts-row">
          <dt>Policy rule</dt>
          <dd className="mono">{item.policy_rule_id || 'none recorded'}</dd>
        </div>
        <div className="facts-row">
          <dt>Why it is gated</dt>
          <dd>{item.policy_reason || 'No reason recorded.'}</dd>
        </div>
        {item.safety_decision && (
          <div className="facts-row">
            <dt>Safety decision</dt>
            <dd>
              <StatusBadge status={item.safety_decision} />
            </dd>
          </div>
        )}
        {workflow?.run_id && (
          <div className="facts-row">
            <dt>Workflow</dt>
            <dd>
              <Link to={`/runs/${encodeURIComponent(workflow.run_id)}`}>Run {workflow.run_id}</Link>
              {workflow.workflow_id && <> of {workflow.workflow_id}</>}
              {workflow.step_id && <>, step {workflow.step_id}</>}
            </dd>
          </div>
        )}
      </dl>

      <button type="button" aria-expanded={showContext} onClick={() => setShowContext((v) => !v)}>
        {showContext ? 'Hide context' : 'Show context'}
      </button>
      <Link className="approval-open" to={`/approvals/${encodeURIComponent(jobId)}`}>
        Open approval page
      </Link>
      {showContext && <Context jobId={jobId} />}

      <DecisionForm jobId={jobId} blocked={may ? '' : why} onDecided={(decision) => onDecided(jobId, decision)} />
    </article>
  );
}
