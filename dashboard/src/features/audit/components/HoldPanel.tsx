import { useId, useState } from 'react';

import { ConfirmButton, ErrorState, formatTime, Loading, Unavailable } from '@/components';
import { describeError } from '@/lib/api';
import type { Verdict } from '@/lib/capabilities';

import { useAuditHold, useChangeHold } from '../api';

/** The tenant's legal hold: while set, nothing of the chain is trimmed. */
export function HoldPanel({ enabled, may }: { enabled: boolean; may: Verdict }) {
  const headingId = useId();
  const reasonId = useId();
  const whyNotId = useId();
  const hold = useAuditHold(enabled);
  const change = useChangeHold();
  const [reason, setReason] = useState('');

  let body;
  if (hold.isPending) body = <Loading label="Loading the legal hold…" />;
  else if (hold.isError) body = <ErrorState error={hold.error} retry={() => void hold.refetch()} />;
  else {
    const held = Boolean(hold.data.held);
    const describedBy = may.allowed ? undefined : whyNotId;
    body = (
      <>
        {held ? (
          <p className="hold-state">
            <span className="badge badge-warning">
              <span className="badge-glyph" aria-hidden="true">
                ■
              </span>
              <span>On hold</span>
            </span>{' '}
            Set{hold.data.by ? ` by ${hold.data.by}` : ''}
            {hold.data.at ? ` on ${formatTime(hold.data.at)}` : ''}
            {hold.data.reason ? `: ${hold.data.reason}` : '.'} Nothing of the chain is trimmed while it holds.
          </p>
        ) : (
          <p className="hold-state">
            <span className="badge badge-neutral">
              <span className="badge-glyph" aria-hidden="true">
                ○
              </span>
              <span>No hold</span>
            </span>{' '}
            Entries already exported may be trimmed from the store.
          </p>
        )}
        {held && !may.allowed ? (
          <button type="button" disabled aria-describedby={describedBy}>
            Clear the hold
          </button>
        ) : held ? (
          <ConfirmButton
            onConfirm={() => change.mutate({ set: false })}
            disabled={change.isPending}
            question="Lift the legal hold? Exported entries may then be trimmed."
            confirmLabel="Yes, clear the hold"
          >
            Clear the hold
          </ConfirmButton>
        ) : (
          <form
            className="hold-form"
            onSubmit={(e) => {
              e.preventDefault();
              change.mutate({ set: true, reason: reason.trim() }, { onSuccess: () => setReason('') });
            }}
          >
            <div className="field">
              <label htmlFor={reasonId}>Reason for the hold</label>
              <input
                id={reasonId}
                value={reason}
                maxLength={512}
                disabled={!may.allowed}
                aria-describedby={describedBy}
                onChange={(e) => setReason(e.target.value)}
              />
            </div>
            <button type="submit" disabled={!may.allowed || change.isPending} aria-describedby={describedBy}>
              Set the hold
            </button>
          </form>
        )}
        <Unavailable id={whyNotId} reason={may.allowed ? '' : may.reason} />
        {change.isError && (
          <p className="form-error" role="alert">
            {describeError(change.error)}
          </p>
        )}
      </>
    );
  }
  return (
    <section className="card audit-panel" aria-labelledby={headingId}>
      <h2 id={headingId}>Legal hold</h2>
      {body}
    </section>
  );
}
