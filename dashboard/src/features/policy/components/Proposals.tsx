import { useId } from 'react';

import { ConfirmButton, EmptyState, ErrorState, formatTime, Loading, Unavailable } from '@/components';
import { describeError } from '@/lib/api';
import type { Verdict } from '@/lib/capabilities';

import { type Notice } from './Pending';
import { describeProposal, ownProposalReason, useConfirmProposal, useProposals, useRejectProposal, type Proposal } from '../api';

export type Report = (notice: Notice) => void;

function ProposalRow({ proposal, change, principalId, report }: { proposal: Proposal; change: Verdict; principalId?: string; report: Report }) {
  const confirm = useConfirmProposal();
  const reject = useRejectProposal();
  const whyId = useId();
  const own = ownProposalReason(proposal, principalId);
  const confirmBlock = !change.allowed ? change.reason : own;
  const busy = confirm.isPending || reject.isPending;
  const pid = proposal.id ?? '';
  return (
    <tr>
      <th scope="row" className="cell-id">
        {pid}
      </th>
      <td>{describeProposal(proposal)}</td>
      <td>{proposal.proposed_by}</td>
      <td>{formatTime(proposal.proposed_at)}</td>
      <td>{formatTime(proposal.expires_at)}</td>
      <td>
        <div className="row-actions">
          <button
            type="button"
            className="button-primary"
            disabled={busy || Boolean(confirmBlock)}
            aria-describedby={confirmBlock ? whyId : undefined}
            onClick={() =>
              confirm.mutate(pid, {
                onSuccess: () => report({ text: `Confirmed proposal ${pid}: the change is in force.` }),
                onError: (error) => report({ text: `Confirming ${pid} failed: ${describeError(error)}`, failed: true }),
              })
            }
          >
            Confirm
          </button>
          {change.allowed ? (
            <ConfirmButton
              disabled={busy}
              question={`Reject proposal ${pid}? The change is dropped.`}
              confirmLabel="Yes, reject"
              onConfirm={() =>
                reject.mutate(
                  { proposalId: pid },
                  {
                    onSuccess: () => report({ text: `Rejected proposal ${pid}.` }),
                    onError: (error) => report({ text: `Rejecting ${pid} failed: ${describeError(error)}`, failed: true }),
                  },
                )
              }
            >
              Reject
            </ConfirmButton>
          ) : (
            <button type="button" disabled aria-describedby={whyId}>
              Reject
            </button>
          )}
        </div>
        <Unavailable id={whyId} reason={confirmBlock} />
      </td>
    </tr>
  );
}

/** Changes waiting for a second person: confirm or reject them (never one's own). */
export function Proposals({ change, principalId, report }: { change: Verdict; principalId?: string; report: Report }) {
  const proposals = useProposals(true);
  if (proposals.isPending) return <Loading label="Loading proposals…" />;
  if (proposals.isError) return <ErrorState error={proposals.error} retry={() => void proposals.refetch()} />;
  if (proposals.data.length === 0) {
    return (
      <EmptyState
        title="No change waits for confirmation"
        description="When two people are required, a change of the bundles in force waits here until another identity confirms it."
      />
    );
  }
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">Changes waiting for a second person</caption>
        <thead>
          <tr>
            <th scope="col">Proposal</th>
            <th scope="col">Change</th>
            <th scope="col">Proposed by</th>
            <th scope="col">Proposed</th>
            <th scope="col">Lapses</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {proposals.data.map((proposal) => (
            <ProposalRow key={proposal.id} proposal={proposal} change={change} principalId={principalId} report={report} />
          ))}
        </tbody>
      </table>
    </div>
  );
}
