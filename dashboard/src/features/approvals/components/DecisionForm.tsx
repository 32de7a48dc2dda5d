import { useId, useState } from 'react';

import { Unavailable } from '@/components';

import { decisionError, useDecide, type Decision } from '../api';

/**
 * Approve or reject with a reason; disabled, with `blocked` as the reason beside it,
 * when the signed-in key may not decide (or the approval is no longer open).
 */
export function DecisionForm({
  jobId,
  blocked,
  onDecided,
}: {
  jobId: string;
  blocked: string;
  onDecided: (decision: Decision) => void;
}) {
  const reasonId = useId();
  const whyNotId = useId();
  const problemId = useId();
  const [reason, setReason] = useState('');
  const [missingReason, setMissingReason] = useState(false);
  const decide = useDecide(jobId);

  function send(decision: Decision) {
    if (!reason.trim()) {
      setMissingReason(true);
      return;
    }
    setMissingReason(false);
    decide.mutate({ decision, reason: reason.trim() }, { onSuccess: () => onDecided(decision) });
  }

  const may = !blocked;
  const problem = missingReason ? 'Give a reason for the decision.' : decide.isError ? decisionError(decide.error) : '';
  const describedBy = [may ? '' : whyNotId, problem ? problemId : ''].filter(Boolean).join(' ') || undefined;

  return (
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
      </div>
      <Unavailable id={whyNotId} reason={blocked} />
      {problem && (
        <p id={problemId} className="form-error" role="alert">
          {problem}
        </p>
      )}
    </div>
  );
}
