import { useId, useState } from 'react';
import { Link } from 'react-router';

import { ConfirmButton, EmptyState, ErrorState, formatTime, Loading, Page, Pager, StatusBadge, useCursorPages } from '@/components';
import { describeError } from '@/lib/api';

import { entryReason, useDeleteEntry, useDlq, useRetryEntry, type DlqEntry } from '../api';

type Outcome = { text: string; newJobId?: string; failed?: boolean };

function EntryRow({ entry, onOutcome }: { entry: DlqEntry; onOutcome: (o: Outcome) => void }) {
  const jobId = entry.job_id ?? '';
  const idCell = useId();
  const retry = useRetryEntry();
  const remove = useDeleteEntry();
  const busy = retry.isPending || remove.isPending;
  return (
    <tr>
      <th scope="row" id={idCell} className="cell-id">
        <Link to={`/jobs/${encodeURIComponent(jobId)}`}>{jobId}</Link>
      </th>
      <td>{entry.topic}</td>
      <td>{entryReason(entry)}</td>
      <td>{entry.original_state && <StatusBadge status={entry.original_state} />}</td>
      <td>{formatTime(entry.failed_at)}</td>
      <td className="num">{entry.retry_count ?? 0}</td>
      <td>
        <div className="row-actions">
          <button
            type="button"
            disabled={busy}
            aria-describedby={idCell}
            onClick={() =>
              retry.mutate(jobId, {
                onSuccess: (answer) =>
                  onOutcome({ text: `Retried job ${jobId} as a new job`, newJobId: answer?.job_id }),
                onError: (error) => onOutcome({ text: `Retry of ${jobId} failed: ${describeError(error)}`, failed: true }),
              })
            }
          >
            Retry
          </button>
          <ConfirmButton
            disabled={busy}
            question={`Delete the DLQ entry of job ${jobId}? This cannot be undone.`}
            confirmLabel="Yes, delete"
            onConfirm={() =>
              remove.mutate(jobId, {
                onSuccess: () => onOutcome({ text: `Deleted the DLQ entry of job ${jobId}.` }),
                onError: (error) =>
                  onOutcome({ text: `Delete of ${jobId} failed: ${describeError(error)}`, failed: true }),
              })
            }
          >
            Delete
          </ConfirmButton>
        </div>
      </td>
    </tr>
  );
}

/** Jobs that failed for good, with a way to run them again or let them go. */
export function DlqPage() {
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const [outcome, setOutcome] = useState<Outcome | null>(null);
  const dlq = useDlq(cursor);

  let body;
  if (dlq.isPending) body = <Loading label="Loading the DLQ…" />;
  else if (dlq.isError) body = <ErrorState error={dlq.error} retry={() => void dlq.refetch()} />;
  else if (dlq.data.items.length === 0 && onFirstPage) {
    body = <EmptyState title="The DLQ is empty" description="Jobs that fail for good are kept here." />;
  } else {
    const { items, nextCursor } = dlq.data;
    body = (
      <>
        <div className="table-wrap">
          <table className="data-table">
            <caption className="visually-hidden">Dead-letter entries</caption>
            <thead>
              <tr>
                <th scope="col">Job ID</th>
                <th scope="col">Topic</th>
                <th scope="col">Reason</th>
                <th scope="col">State</th>
                <th scope="col">Failed</th>
                <th scope="col" className="num">
                  Retries
                </th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {items.map((entry) => (
                <EntryRow key={entry.job_id} entry={entry} onOutcome={setOutcome} />
              ))}
            </tbody>
          </table>
        </div>
        <Pager {...pagerProps(nextCursor)} />
      </>
    );
  }
  return (
    <Page title="DLQ">
      <div role="status">
        {outcome && (
          <p className={outcome.failed ? 'notice notice-danger' : 'notice'}>
            {outcome.text}
            {outcome.newJobId && (
              <>
                : <Link to={`/jobs/${encodeURIComponent(outcome.newJobId)}`}>{outcome.newJobId}</Link>
              </>
            )}
          </p>
        )}
      </div>
      {body}
    </Page>
  );
}
