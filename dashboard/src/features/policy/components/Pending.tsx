import { formatTime } from '@/components';

import { describeProposal, type Proposal } from '../api';

/** A change kept as a proposal: it is not in force until another identity confirms it. */
export function PendingProposal({ proposal }: { proposal: Proposal }) {
  return (
    <div className="notice notice-warning policy-pending">
      <p>
        <strong>Waiting for a second person.</strong> This change is kept as a proposal and is not in force until
        another identity confirms it on the policy page.
      </p>
      <dl className="facts">
        <dt>Proposal</dt>
        <dd className="cell-id">{proposal.id}</dd>
        <dt>Change</dt>
        <dd>{describeProposal(proposal)}</dd>
        {proposal.proposed_by && (
          <>
            <dt>Proposed by</dt>
            <dd>{proposal.proposed_by}</dd>
          </>
        )}
        {proposal.expires_at && (
          <>
            <dt>Lapses</dt>
            <dd>{formatTime(proposal.expires_at)}</dd>
          </>
        )}
      </dl>
    </div>
  );
}
