import { useId, useState } from 'react';
import { Link } from 'react-router';

import { ErrorState, formatTime, JsonView, Loading, StatusBadge } from '@/components';

import {
  decidable,
  decisionError,
  useApprovalContext,
  useDecide,
  type ApprovalItem,
  type Decision,
} from '../api';

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
  const reasonId = useId();
  const whyNotId = useId();
  const problemId = useId();
  const [reason, setReason] = useState('');
  const [showContext, setShowContext] = useState(false);
  const [missingReason, setMissingReason] = useState(false);
  const decide = useDecide(jobId);
  const { may, why } = decidable(item);
  const workflow = item.workflow;

  function send(decision: Decision) {
    if (!reason.trim()) {
      setMissingReason(true);
      return;
    }
    setMissingReason(false);
    decide.mutate(
      { decision, reason: reason.trim() },
      { onSuccess: () => onDecided(jobId, decision) },
    );
  }

  const problem = missingReason ? 'Give a reason for the decision.' : decide.isError ? decisionError(decide.error) : '';
  const describedBy = [may ? '' : whyNotId, problem ? problemId : ''].filter(Boolean).join(' ') || undefined;

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
      {showContext && <Context jobId={jobId} />}

      <div className="decision">
        <div className="field">
          <label htmlFor={reasonId}>Reason</label>
          <textarea
            id={reasonId}
            value={reason}
            maxLength={512}
            disabled={!may}
            onChange={(e) => setReason(e.target.value)}
            aria-describedby={describedBy}
            aria-invalid={missingReason ? true : undefined}
          />
        </div>
        <div className="decision-buttons">
          <button
            type="button"
            className="button-primary"
            disabled={!may || decide.isPending}
            aria-describedby={describedBy}
            onClick={() => send('approve')}
          >
            Approve
          </button>
          <button
            type="button"
            className="button-danger"
            disabled={!may || decide.isPending}
            aria-describedby={describedBy}
            onClick={() => send('reject')}
          >
            Reject
          </button>
          {!may && (
            <p id={whyNotId} className="decision-why">
              {why}
            </p>
          )}
        </div>
        {problem && (
          <p id={problemId} className="form-error" role="alert">
            {problem}
          </p>
        )}
      </div>
    </article>
  );
}
