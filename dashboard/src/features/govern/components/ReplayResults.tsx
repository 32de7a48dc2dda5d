import { Link } from 'react-router';

import { EmptyState, formatTime, Pager } from '@/components';
import { describeError } from '@/lib/api';

import { CHANGES_PAGE_SIZE, changedCount, type ReplayRun } from '../api';

const DIRECTION_TEXT: Record<string, string> = { escalated: 'stricter', relaxed: 'looser' };

/** What a replay found: its counts, the jobs whose decision changes (20 a page), the rules hit. */
export function ReplayResults({
  run,
  page,
  onPage,
  onReadFurther,
  reading,
  furtherError,
}: {
  run: ReplayRun;
  page: number;
  onPage: (page: number) => void;
  onReadFurther: () => void;
  reading: boolean;
  furtherError: unknown;
}) {
  const { totals, changes } = run;
  const changed = changedCount(totals);
  const pages = Math.max(1, Math.ceil(changes.length / CHANGES_PAGE_SIZE));
  const shown = Math.min(page, pages - 1);
  const first = shown * CHANGES_PAGE_SIZE;
  const rows = changes.slice(first, first + CHANGES_PAGE_SIZE);

  return (
    <section className="govern-results" aria-labelledby="replay-result-heading">
      <h2 id="replay-result-heading">Result</h2>
      <p className="govern-headline" data-testid="replay-changed">
        <strong>{changed}</strong> {changed === 1 ? 'decision changes' : 'decisions change'} of {totals.evaluated}{' '}
        {totals.evaluated === 1 ? 'job' : 'jobs'} decided again.
      </p>
      <dl className="facts govern-summary">
        <dt>Jobs replayed</dt>
        <dd>{totals.total_jobs}</dd>
        <dt>Decided again</dt>
        <dd>{totals.evaluated}</dd>
        <dt>Stricter (escalated)</dt>
        <dd>{totals.escalated}</dd>
        <dt>Looser (relaxed)</dt>
        <dd>{totals.relaxed}</dd>
        <dt>Unchanged</dt>
        <dd>{totals.unchanged}</dd>
        <dt>Could not be read</dt>
        <dd>{totals.errored}</dd>
        <dt>Index entries read</dt>
        <dd>{totals.scanned}</dd>
        {run.policySnapshot && (
          <>
            <dt>Candidate snapshot</dt>
            <dd className="cell-id">{run.policySnapshot}</dd>
          </>
        )}
      </dl>

      {run.nextCursor && (
        <div className="notice notice-warning govern-further">
          <p>
            The replay stopped at its {run.stoppedBy ?? 'scan'} bound before the end of the window: the counts cover
            the jobs read so far.
          </p>
          <button type="button" onClick={onReadFurther} disabled={reading}>
            {reading ? 'Reading…' : 'Read further'}
          </button>
          {furtherError ? (
            <p className="form-error" role="alert">
              Reading further failed: {describeError(furtherError)}
            </p>
          ) : null}
        </div>
      )}

      {run.warnings.length > 0 && (
        <ul className="govern-warnings" aria-label="Warnings">
          {run.warnings.map((w) => (
            <li key={w}>{w}</li>
          ))}
        </ul>
      )}

      <h3>Jobs whose decision changes</h3>
      {changes.length === 0 ? (
        <EmptyState
          title="No decision changes"
          description="The candidate decides every job it read as the policy decided it then."
        />
      ) : (
        <>
          <p className="govern-muted" aria-live="polite">
            Showing {first + 1}–{first + rows.length} of {changes.length}.
          </p>
          <div className="table-wrap">
            <table className="data-table">
              <caption className="visually-hidden">Jobs whose decision changes under the candidate</caption>
              <thead>
                <tr>
                  <th scope="col">Job ID</th>
                  <th scope="col">Topic</th>
                  <th scope="col">Recorded decision</th>
                  <th scope="col">Candidate decision</th>
                  <th scope="col">Change</th>
                  <th scope="col">Rule</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Last state change</th>
                </tr>
              </thead>
              <tbody>
                {rows.map((c) => (
                  <tr key={c.job_id}>
                    <th scope="row" className="cell-id">
                      <Link to={`/jobs/${encodeURIComponent(c.job_id ?? '')}`}>{c.job_id}</Link>
                    </th>
                    <td>{c.topic}</td>
                    <td>{c.original_decision}</td>
                    <td>
                      <span aria-hidden="true">→ </span>
                      {c.new_decision}
                    </td>
                    <td>{DIRECTION_TEXT[c.direction ?? ''] ?? c.direction}</td>
                    <td className="cell-id">{c.new_rule_id || '—'}</td>
                    <td>{c.new_reason}</td>
                    <td>{formatTime(c.at)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
          <Pager
            hasNext={shown < pages - 1}
            hasPrevious={shown > 0}
            onNext={() => onPage(shown + 1)}
            onPrevious={() => onPage(shown - 1)}
            onFirst={() => onPage(0)}
          />
        </>
      )}

      {run.errors.length > 0 && (
        <details className="govern-numbers">
          <summary>Jobs that could not be read ({run.errors.length})</summary>
          <ul>
            {run.errors.map((e) => (
              <li key={e.job_id}>
                <Link to={`/jobs/${encodeURIComponent(e.job_id ?? '')}`}>{e.job_id}</Link>: {e.error}
              </li>
            ))}
          </ul>
        </details>
      )}

      {run.ruleHits.length > 0 && (
        <details className="govern-numbers">
          <summary>Rules the candidate decided by</summary>
          <div className="table-wrap">
            <table className="data-table">
              <caption className="visually-hidden">Decisions of the candidate by rule</caption>
              <thead>
                <tr>
                  <th scope="col">Rule</th>
                  <th scope="col">Decision</th>
                  <th scope="col" className="num">
                    Jobs
                  </th>
                </tr>
              </thead>
              <tbody>
                {run.ruleHits.map((h) => (
                  <tr key={`${h.rule_id}-${h.decision}`}>
                    <th scope="row" className="cell-id">
                      {h.rule_id || '(no rule: the default)'}
                    </th>
                    <td>{h.decision}</td>
                    <td className="num">{h.count}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </details>
      )}
    </section>
  );
}
