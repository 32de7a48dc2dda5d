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

/** What the page says after an act: its outcome, or the proposal it became. */
export type Notice = { text: string; failed?: boolean; proposal?: Proposal };

/** The page's live region for its latest notice. */
export function NoticeArea({ notice }: { notice: Notice | null }) {
  return (
    <div role="status" aria-live="polite">
      {notice && (
        <div className={notice.failed ? 'notice notice-danger' : 'notice'}>
          <p>{notice.text}</p>
        </div>
      )}
      {notice?.proposal && <PendingProposal proposal={notice.proposal} />}
    </div>
  );
}
