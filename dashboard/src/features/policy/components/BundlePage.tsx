import { useId, useState } from 'react';
import { Link, useNavigate, useParams } from 'react-router';

import { ConfirmButton, ErrorState, formatTime, Loading, Page } from '@/components';
import { describeError } from '@/lib/api';
import { useCapabilities, useMe, type Verdict } from '@/lib/capabilities';

import {
  bundleIdOf,
  useBundle,
  useDeleteBundle,
  usePublish,
  useSaveBundle,
  type Bundle,
} from '../api';
import { problemOf, type BundleProblem } from '../validation';
import '../policy.css';
import { DiffView } from './DiffView';
import { Editor } from './Editor';
import { NoticeArea, type Notice } from './Pending';
import { Refused } from './Refused';
import { SimulateForm } from './SimulateForm';
import { StateBadge } from './StateBadge';


function BundleEditor({ id, stored, change, simulate }: { id: string; stored: Bundle | null; change: Verdict; simulate: Verdict }) {
  const navigate = useNavigate();
  const storedContent = stored?.content ?? '';
  const [text, setText] = useState(storedContent);
  const [message, setMessage] = useState('');
  const [problem, setProblem] = useState<BundleProblem | null>(null);
  const [notice, setNotice] = useState<Notice | null>(null);
  const save = useSaveBundle();
  const publish = usePublish();
  const remove = useDeleteBundle();
  const messageId = useId();
  const isNew = stored === null;
  const dirty = text !== storedContent;
  const inForce = stored?.enabled === true;

  function onSave() {
    setNotice(null);
    save.mutate(
      { id, content: text, message, isNew },
      {
        onSuccess: (answer) => {
          setProblem(null);
          if (answer.pending) setNotice({ text: 'The edit waits for a second person.', proposal: answer.proposal });
          else setNotice({ text: answer.result.enabled ? `Saved ${id}; it is in force.` : `Saved ${id} as a draft.` });
        },
        onError: (error) => {
          const found = problemOf(error);
          setProblem(found);
          setNotice({ text: found ? 'The bundle was not saved: it does not validate.' : `Saving failed: ${describeError(error)}`, failed: true });
        },
      },
    );
  }

  function onPublish() {
    setNotice(null);
    publish.mutate(
      { bundleIds: [id], message },
      {
        onSuccess: (answer) => {
          if (answer.pending) {
            setNotice({ text: 'The publish waits for a second person.', proposal: answer.proposal });
            return;
          }
          const { snapshot_before: before, snapshot_after: after } = answer.result;
          setNotice({
            text: `Published ${id}. Snapshot before: ${before || 'none (there were no bundles)'}. Snapshot after: ${after ?? ''}.${
              before ? ' To undo, roll back to the snapshot before on the policy page.' : ''
            }`,
          });
        },
        onError: (error) => setNotice({ text: `Publishing failed: ${describeError(error)}`, failed: true }),
      },
    );
  }

  function onDelete() {
    setNotice(null);
    remove.mutate(id, {
      onSuccess: (answer) => {
        if (answer.pending) setNotice({ text: 'The deletion waits for a second person.', proposal: answer.proposal });
        else void navigate('/policy', { state: { notice: `Deleted bundle ${id}.` } });
      },
      onError: (error) => setNotice({ text: `Deleting failed: ${describeError(error)}`, failed: true }),
    });
  }

  const busy = save.isPending || publish.isPending || remove.isPending;
  let publishBlock = '';
  if (!change.allowed) publishBlock = change.reason;
  else if (isNew) publishBlock = 'Save the bundle first: a publish puts the stored content in force.';
  else if (dirty) publishBlock = 'The editor has unsaved changes: save them first, a publish puts the stored content in force.';

  return (
    <>
      <dl className="facts">
        <dt>State</dt>
        <dd>{isNew ? 'New: not saved yet' : <StateBadge enabled={inForce} />}</dd>
        {stored && (
          <>
            <dt>Source</dt>
            <dd>{stored.source || 'unknown'}</dd>
            <dt>Author</dt>
            <dd>{stored.author || 'unknown'}</dd>
            <dt>Updated</dt>
            <dd>{formatTime(stored.updated_at) || 'unknown'}</dd>
            <dt>Rules</dt>
            <dd>{stored.rule_count ?? 0}</dd>
            <dt>SHA-256</dt>
            <dd className="cell-id">{stored.sha256}</dd>
          </>
        )}
      </dl>

      <NoticeArea notice={notice} />

      <section aria-labelledby="policy-edit-heading" className="policy-section">
        <h2 id="policy-edit-heading">Content</h2>
        <Editor label="Bundle YAML" value={text} onChange={setText} problem={problem} />
        <div className="field policy-message">
          <label htmlFor={messageId}>Message (why, kept in the audit)</label>
          <input id={messageId} value={message} onChange={(e) => setMessage(e.target.value)} />
        </div>
        {inForce && change.allowed && (
          <p className="notice notice-warning">This bundle is in force: a save changes the policy at once.</p>
        )}
        <div className="row-actions policy-actions">
          {change.allowed ? (
            <button type="button" className="button-primary" disabled={busy} onClick={onSave}>
              {save.isPending ? 'Saving…' : inForce ? 'Save changes' : 'Save draft'}
            </button>
          ) : (
            <Refused label={inForce ? 'Save changes' : 'Save draft'} reason={change.reason} />
          )}
        </div>
      </section>

      <section aria-labelledby="policy-diff-heading" className="policy-section">
        <h2 id="policy-diff-heading">Changes</h2>
        <DiffView
          before={storedContent}
          after={text}
          beforeLabel={isNew ? 'an empty bundle (none is stored)' : inForce ? 'the stored bundle (in force)' : 'the stored draft'}
        />
      </section>

      <section aria-labelledby="policy-simulate-heading" className="policy-section">
        <h2 id="policy-simulate-heading">Simulate</h2>
        <p className="muted">
          Decides a job under the current policy with this bundle, as the editor holds it, in force. Nothing is stored.
        </p>
        <SimulateForm bundleId={id} content={text} verdict={simulate} />
      </section>

      <section aria-labelledby="policy-publish-heading" className="policy-section">
        <h2 id="policy-publish-heading">Publish</h2>
        <p className="muted">Puts the stored bundle in force for every tenant. A snapshot is taken before and after.</p>
        <div className="row-actions policy-actions">
          {publishBlock ? (
            <Refused label="Publish" reason={publishBlock} />
          ) : (
            <ConfirmButton
              disabled={busy}
              danger={false}
              question={`Publish ${id}? Its rules come into force for every tenant.`}
              confirmLabel="Yes, publish"
              onConfirm={onPublish}
            >
              Publish
            </ConfirmButton>
          )}
        </div>
      </section>

      {!isNew && (
        <section aria-labelledby="policy-delete-heading" className="policy-section">
          <h2 id="policy-delete-heading">Delete</h2>
          <div className="row-actions policy-actions">
            {change.allowed ? (
              <ConfirmButton
                disabled={busy}
                question={`Delete bundle ${id}?${inForce ? ' It is in force: its rules stop applying.' : ''} This cannot be undone, except by a rollback.`}
                confirmLabel="Yes, delete"
                onConfirm={onDelete}
              >
                {inForce ? 'Delete bundle' : 'Delete draft'}
              </ConfirmButton>
            ) : (
              <Refused label={inForce ? 'Delete bundle' : 'Delete draft'} reason={change.reason} />
            )}
          </div>
        </section>
      )}
    </>
  );
}

/** One bundle: its YAML in an editor, the diff against what is stored, a simulation, publish. */
export function BundlePage() {
  const params = useParams();
  const id = bundleIdOf(params.id ?? '');
  const me = useMe();
  const { can } = useCapabilities();
  const read = can('policy.read');
  const bundle = useBundle(id, read.allowed);

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
  } else if (bundle.isPending) body = <Loading label="Loading the bundle…" />;
  else if (bundle.isError) body = <ErrorState error={bundle.error} retry={() => void bundle.refetch()} />;
  else {
    body = <BundleEditor key={id} id={id} stored={bundle.data} change={can('policy.change')} simulate={can('policy.simulate')} />;
  }
  return (
    <Page title={`Bundle ${id}`} actions={<Link to="/policy">All bundles</Link>}>
      {body}
    </Page>
  );
}
