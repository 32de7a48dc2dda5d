import { useId } from 'react';

import { ErrorState, formatTime, Loading } from '@/components';

import type { AuditVerifyResult } from '../api';

type Look = { glyph: string; word: string; tone: 'success' | 'warning' | 'danger' };

/** The result's word and shape: the status is never told by colour alone. */
export function verdictOf(result: AuditVerifyResult): Look & { detail: string } {
  const gap = result.gaps?.[0];
  switch (result.status) {
    case 'ok':
      return { glyph: '✔', word: 'Chain verified', tone: 'success', detail: 'Every entry links to the one before it.' };
    case 'partial':
      return {
        glyph: '◐',
        word: 'Partial',
        tone: 'warning',
        detail:
          result.exported_through_seq !== null && result.exported_through_seq !== undefined
            ? `Checked from the export mark at seq ${result.exported_through_seq}; the entries before it were exported.`
            : 'Only part of the chain could be checked here.',
      };
    case 'compromised':
      return {
        glyph: '✖',
        word: 'Compromised',
        tone: 'danger',
        detail: gap
          ? `First bad entry at seq ${gap.at_seq}${gap.type ? ` (${gap.type.replace(/_/g, ' ')})` : ''}.`
          : 'The check found a problem with the chain.',
      };
    default:
      return { glyph: '?', word: result.status || 'Unknown', tone: 'warning', detail: 'The check gave an unknown answer.' };
  }
}

/** The chain check's result as a badge with its counts. */
export function VerifyResult({ result }: { result: AuditVerifyResult }) {
  const look = verdictOf(result);
  const gaps = result.gaps ?? [];
  return (
    <div className="verify-result">
      <p className="verify-line">
        <span className={`badge badge-${look.tone} verify-badge`} data-status={result.status}>
          <span className="badge-glyph" aria-hidden="true">
            {look.glyph}
          </span>
          <span>{look.word}</span>
        </span>{' '}
        <span>{look.detail}</span>
      </p>
      <p className="muted">
        {result.verified_events ?? 0} of {result.total_events ?? 0} entries verified
        {result.first_seq !== undefined && result.last_seq !== undefined && result.total_events
          ? `, seq ${result.first_seq} to ${result.last_seq}`
          : ''}
        {result.hmac_verified ? '; signatures (HMAC) checked' : '; signatures (HMAC) not checked'}
        {result.checked_at ? `; checked ${formatTime(result.checked_at)}` : ''}.
      </p>
      {gaps.length > 1 && (
        <details>
          <summary>All findings ({gaps.length}{result.gaps_truncated ? ', more not listed' : ''})</summary>
          <ul>
            {gaps.map((g, i) => (
              <li key={`${g.at_seq}-${g.type}-${i}`}>
                seq {g.at_seq}: {g.type}
                {g.count && g.count > 1 ? ` (${g.count} entries)` : ''}
              </li>
            ))}
          </ul>
        </details>
      )}
    </div>
  );
}

export function VerifyPanel({
  verify,
}: {
  verify: {
    isPending: boolean;
    isFetching: boolean;
    isError: boolean;
    error: unknown;
    data: AuditVerifyResult | undefined;
    refetch: () => unknown;
  };
}) {
  const headingId = useId();
  let body;
  if (verify.isPending) body = <Loading label="Checking the chain…" />;
  else if (verify.isError) body = <ErrorState error={verify.error} retry={() => void verify.refetch()} />;
  else if (verify.data) body = <VerifyResult result={verify.data} />;
  return (
    <section className="card audit-panel" aria-labelledby={headingId}>
      <h2 id={headingId}>Chain integrity</h2>
      {body}
      {!verify.isPending && (
        <button type="button" onClick={() => void verify.refetch()} disabled={verify.isFetching}>
          {verify.isFetching ? 'Checking…' : 'Check again'}
        </button>
      )}
    </section>
  );
}
