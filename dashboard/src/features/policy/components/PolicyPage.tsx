import { useId, useState, type FormEvent } from 'react';
import { Link, useLocation, useNavigate } from 'react-router';

import { ConfirmButton, EmptyState, ErrorState, formatTime, Loading, Page, Unavailable } from '@/components';
import { describeError } from '@/lib/api';
import { useCapabilities, useMe, type Verdict } from '@/lib/capabilities';

import {
  bundlePath,
  AUDIT_LIMIT,
  useBundles,
  usePolicyAudit,
  useRollback,
  useSaveBundle,
  useSnapshots,
} from '../api';
import '../policy.css';
import { Editor } from './Editor';
import { Refused } from './Refused';
import { StateBadge } from './StateBadge';
import { problemOf, type BundleProblem } from '../validation';

import { NoticeArea, type Notice } from './Pending';
import { Proposals, type Report } from './Proposals';

function short(sha: string | undefined): string {
  return sha ? sha.slice(0, 12) : '';
}

function Bundles() {
  const bundles = useBundles(true);
  if (bundles.isPending) return <Loading label="Loading bundles…" />;
  if (bundles.isError) return <ErrorState error={bundles.error} retry={() => void bundles.refetch()} />;
  if (bundles.data.length === 0) {
    return <EmptyState title="No bundles" description="Only the base file decides. Write a draft below to add rules." />;
  }
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">Policy bundles</caption>
        <thead>
          <tr>
            <th scope="col">Bundle</th>
            <th scope="col">State</th>
            <th scope="col">Source</th>
            <th scope="col">Author</th>
            <th scope="col">Updated</th>
            <th scope="col" className="num">
              Rules
            </th>
            <th scope="col">SHA-256</th>
          </tr>
        </thead>
        <tbody>
          {bundles.data.map((bundle) => (
            <tr key={bundle.id}>
              <th scope="row" className="cell-id">
                <Link to={bundlePath(bundle.id ?? '')}>{bundle.id}</Link>
              </th>
              <td>
                <StateBadge enabled={bundle.enabled} />
              </td>
              <td>{bundle.source}</td>
              <td>{bundle.author}</td>
              <td>{formatTime(bundle.updated_at)}</td>
              <td className="num">{bundle.rule_count ?? 0}</td>
              <td>
                <code>{short(bundle.sha256)}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function NewDraft({ change }: { change: Verdict }) {
  const navigate = useNavigate();
  const idField = useId();
  const [id, setId] = useState('');
  const [content, setContent] = useState('rules:\n  - id: \n    match: {topics: []}\n    decision: deny\n    reason: \n');
  const [problem, setProblem] = useState<BundleProblem | null>(null);
  const [failure, setFailure] = useState('');
  const save = useSaveBundle();

  function submit(event: FormEvent) {
    event.preventDefault();
    const bundleId = id.trim();
    if (!bundleId) {
      setFailure('Give the new bundle an id, e.g. secops/deny-prod.');
      return;
    }
    setFailure('');
    save.mutate(
      { id: bundleId, content, isNew: true },
      {
        onSuccess: () => void navigate(bundlePath(bundleId)),
        onError: (error) => {
          const found = problemOf(error);
          setProblem(found);
          setFailure(found ? 'The draft was not saved: it does not validate.' : `The draft was not saved: ${describeError(error)}`);
        },
      },
    );
  }

  return (
    <form onSubmit={submit} noValidate className="policy-new">
      <div className="field">
        <label htmlFor={idField}>Bundle id</label>
        <input id={idField} value={id} onChange={(e) => setId(e.target.value)} placeholder="secops/deny-prod" />
      </div>
      <Editor label="Draft YAML" value={content} onChange={setContent} problem={problem} rows={8} />
      {change.allowed ? (
        <button type="submit" className="button-primary" disabled={save.isPending}>
          {save.isPending ? 'Saving…' : 'Create draft'}
        </button>
      ) : (
        <Refused label="Create draft" reason={change.reason} />
      )}
      {failure && (
        <p className="form-error" role="alert">
          {failure}
        </p>
      )}
    </form>
  );
}

function Snapshots({ change, report }: { change: Verdict; report: Report }) {
  const snapshots = useSnapshots(true);
  const rollback = useRollback();
  const whyId = useId();
  if (snapshots.isPending) return <Loading label="Loading snapshots…" />;
  if (snapshots.isError) return <ErrorState error={snapshots.error} retry={() => void snapshots.refetch()} />;
  if (snapshots.data.length === 0) {
    return <EmptyState title="No snapshots yet" description="Each publish and rollback takes a snapshot before and after." />;
  }

  function rollBack(snapshotId: string) {
    rollback.mutate(snapshotId, {
      onSuccess: (answer) => {
        if (answer.pending) report({ text: 'The rollback waits for a second person.', proposal: answer.proposal });
        else {
          report({
            text: `Rolled back to snapshot ${snapshotId}. Snapshot before the rollback: ${answer.result.snapshot_before || 'none'}.`,
          });
        }
      },
      onError: (error) => report({ text: `The rollback failed: ${describeError(error)}`, failed: true }),
    });
  }

  return (
    <>
      <Unavailable id={whyId} reason={change.allowed ? '' : change.reason} />
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Snapshots of the bundles, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Snapshot</th>
              <th scope="col">Taken</th>
              <th scope="col">Author</th>
              <th scope="col">Note</th>
              <th scope="col">Bundles</th>
              <th scope="col">Action</th>
            </tr>
          </thead>
          <tbody>
            {snapshots.data.map((snapshot) => {
              const sid = snapshot.id ?? '';
              const ids = snapshot.bundle_ids ?? [];
              return (
                <tr key={sid}>
                  <th scope="row" className="cell-id">
                    {sid}
                  </th>
                  <td>{formatTime(snapshot.created_at)}</td>
                  <td>{snapshot.author}</td>
                  <td>{snapshot.note}</td>
                  <td>{ids.length ? ids.join(', ') : <span className="muted">none</span>}</td>
                  <td>
                    {change.allowed ? (
                      <ConfirmButton
                        disabled={rollback.isPending}
                        question={`Roll the bundles back to snapshot ${sid}? Every bundle comes back as it was then; later changes are undone.`}
                        confirmLabel="Yes, roll back"
                        onConfirm={() => rollBack(sid)}
                      >
                        Roll back to this snapshot
                      </ConfirmButton>
                    ) : (
                      <button type="button" disabled aria-describedby={whyId}>
                        Roll back to this snapshot
                      </button>
                    )}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </>
  );
}

function Audit() {
  const audit = usePolicyAudit(true);
  if (audit.isPending) return <Loading label="Loading the policy audit…" />;
  if (audit.isError) return <ErrorState error={audit.error} retry={() => void audit.refetch()} />;
  if (audit.data.length === 0) return <EmptyState title="No policy changes recorded" />;
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">The last {AUDIT_LIMIT} changes of the policy, newest first</caption>
        <thead>
          <tr>
            <th scope="col">When</th>
            <th scope="col">Action</th>
            <th scope="col">By</th>
            <th scope="col">Bundle</th>
            <th scope="col">Snapshot after</th>
            <th scope="col">Message</th>
          </tr>
        </thead>
        <tbody>
          {audit.data.map((entry, index) => (
            <tr key={entry.id ?? index}>
              <th scope="row">{formatTime(entry.created_at ?? entry.timestamp)}</th>
              <td>{entry.action}</td>
              <td>{entry.actor_id ?? entry.author}</td>
              <td className="cell-id">{entry.bundle_id ?? (entry.bundle_ids ?? []).join(', ')}</td>
              <td className="cell-id">{entry.snapshot_after ?? entry.snapshot_id ?? ''}</td>
              <td>{entry.message}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** The system policy's bundles, the drafts, the publish history and who changed what. */
export function PolicyPage() {
  const me = useMe();
  const { can } = useCapabilities();
  const location = useLocation();
  const arrived = (location.state as { notice?: string } | null)?.notice;
  const [notice, setNotice] = useState<Notice | null>(arrived ? { text: arrived } : null);
  const read = can('policy.read');
  const change = can('policy.change');

  let body;
  if (me.isPending) body = <Loading label="Checking what the signed-in key may do…" />;
  else if (me.isError) body = <ErrorState error={me.error} retry={() => void me.refetch()} />;
  else if (!read.allowed) {
    body = (
      <p className="notice notice-warning">
        <span aria-hidden="true">🔒 </span>
        {read.reason}
      </p>
    );
  } else {
    const principalId = me.data.principal_id;
    body = (
      <>
        <NoticeArea notice={notice} />
        <section aria-labelledby="policy-bundles-heading" className="policy-section">
          <h2 id="policy-bundles-heading">Bundles</h2>
          <Bundles />
        </section>
        <section aria-labelledby="policy-new-heading" className="policy-section">
          <h2 id="policy-new-heading">New draft</h2>
          <p className="muted">A new bundle is a draft: nothing changes until it is published.</p>
          <NewDraft change={change} />
        </section>
        <section aria-labelledby="policy-proposals-heading" className="policy-section">
          <h2 id="policy-proposals-heading">Waiting for confirmation</h2>
          <Proposals change={change} principalId={principalId} report={setNotice} />
        </section>
        <section aria-labelledby="policy-history-heading" className="policy-section">
          <h2 id="policy-history-heading">Publish history</h2>
          <p className="muted">Snapshots of the bundles, newest first (the last 10). A rollback restores one.</p>
          <Snapshots change={change} report={setNotice} />
        </section>
        <section aria-labelledby="policy-audit-heading" className="policy-section">
          <h2 id="policy-audit-heading">Recent changes</h2>
          <Audit />
        </section>
      </>
    );
  }
  return <Page title="Policy">{body}</Page>;
}
