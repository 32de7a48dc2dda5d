import { useId, useState, type FormEvent } from 'react';

import { EmptyState, ErrorState, formatJson, formatTime, JsonView, Loading, Page, Unavailable } from '@/components';
import { useCapabilities, useMe } from '@/lib/capabilities';

import '../data.css';
import {
  saveConfigError,
  SCOPES,
  useConfigDocument,
  useEffectiveConfig,
  useSaveConfig,
  type ConfigDocument,
  type EffectiveQuery,
  type Scope,
} from '../api';
import { SubmitRow } from './SubmitRow';

type Target = { scope: Scope; id: string };

const NO_IDS: EffectiveQuery = { team_id: '', workflow_id: '', step_id: '' };

/** Scopes whose documents are named by an id the user gives. */
export function scopeNeedsId(scope: Scope): boolean {
  return scope === 'team' || scope === 'workflow' || scope === 'step';
}

/** The effective config's ids for a document at `target`: its own scope's id. */
export function effectiveIdsFor(target: Target): EffectiveQuery {
  if (target.scope === 'team') return { ...NO_IDS, team_id: target.id };
  if (target.scope === 'workflow') return { ...NO_IDS, workflow_id: target.id };
  if (target.scope === 'step') return { ...NO_IDS, step_id: target.id };
  return NO_IDS;
}

/** The editor's text, parsed: the members to set, or why it cannot be sent. */
export function parseConfigData(text: string): { data?: Record<string, unknown>; error?: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { error: `The data is not valid JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { error: 'The data must be a JSON object of members to set.' };
  }
  return { data: value as Record<string, unknown> };
}

function ScopePicker({ onLoad }: { onLoad: (target: Target) => void }) {
  const ids = { scope: useId(), id: useId(), hint: useId() };
  const [scope, setScope] = useState<Scope>('team');
  const [id, setId] = useState('');
  const needsId = scopeNeedsId(scope);

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    if (needsId && !id.trim()) return;
    onLoad({ scope, id: scope === 'org' ? '' : id.trim() });
  }

  const hint =
    scope === 'org'
      ? 'The org is always the signed-in tenant.'
      : scope === 'system'
        ? 'Empty means "default", the document merged into every tenant\'s config.'
        : `The ${scope}'s ID.`;
  return (
    <form className="filters" onSubmit={submit} aria-label="Choose a config document">
      <div className="field">
        <label htmlFor={ids.scope}>Scope</label>
        <select id={ids.scope} value={scope} onChange={(e) => setScope(e.target.value as Scope)}>
          {SCOPES.map((s) => (
            <option key={s} value={s}>
              {s}
            </option>
          ))}
        </select>
      </div>
      <div className="field">
        <label htmlFor={ids.id}>Scope ID</label>
        <input
          id={ids.id}
          value={scope === 'org' ? '' : id}
          required={needsId}
          disabled={scope === 'org'}
          maxLength={128}
          aria-describedby={ids.hint}
          onChange={(e) => setId(e.target.value)}
        />
      </div>
      <button type="submit">Load document</button>
      <p className="data-hint" id={ids.hint}>
        {hint}
      </p>
    </form>
  );
}

function DocumentEditor({ target, doc }: { target: Target; doc: ConfigDocument | null }) {
  const { can } = useCapabilities();
  const verdict = can('config.write');
  const save = useSaveConfig();
  const ids = { text: useId(), hint: useId() };
  const [text, setText] = useState(formatJson(doc?.data ?? {}));
  const [problem, setProblem] = useState('');
  const revision = doc?.revision ?? 0;

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    if (!verdict.allowed) return;
    const parsed = parseConfigData(text);
    if (!parsed.data) {
      setProblem(parsed.error ?? '');
      return;
    }
    setProblem('');
    save.mutate({ scope: target.scope, scope_id: target.id, data: parsed.data, revision });
  }

  return (
    <form className="data-form" onSubmit={submit} aria-label="Edit the config document">
      <div className="field">
        <label htmlFor={ids.text}>Data (JSON)</label>
        <textarea
          id={ids.text}
          rows={10}
          value={text}
          disabled={!verdict.allowed}
          aria-describedby={ids.hint}
          onChange={(e) => setText(e.target.value)}
        />
      </div>
      <p className="data-hint" id={ids.hint}>
        Each member given replaces the member of that name; members left out are kept. Saved against revision{' '}
        {revision}: if the document changed since, nothing is saved.
      </p>
      <SubmitRow
        label="Save document"
        busyLabel="Saving…"
        busy={save.isPending}
        verdict={verdict}
        problems={[problem, save.isError ? saveConfigError(save.error) : '']}
        done={save.isSuccess && 'Saved.'}
      />
    </form>
  );
}

function DocumentView({ target }: { target: Target }) {
  const doc = useConfigDocument(target.scope, target.id, true);
  if (doc.isPending) return <Loading label="Loading the document…" />;
  if (doc.isError) return <ErrorState error={doc.error} retry={() => void doc.refetch()} />;
  const data = doc.data;
  return (
    <>
      {data === null ? (
        <EmptyState title="No document at this scope yet" description="Saving creates it at revision 1." />
      ) : (
        <>
          <dl className="facts">
            <div className="facts-row">
              <dt>Revision</dt>
              <dd>{data.revision ?? 0}</dd>
            </div>
            {data.updated_at && (
              <div className="facts-row">
                <dt>Updated</dt>
                <dd>{formatTime(data.updated_at)}</dd>
              </div>
            )}
          </dl>
          <JsonView value={data.data ?? {}} label="Data" />
        </>
      )}
      <h3>Edit</h3>
      {/* A new revision starts the editor again from what is stored. */}
      <DocumentEditor key={`${target.scope}/${target.id}@${data?.revision ?? 0}`} target={target} doc={data} />
      {doc.isFetching ? null : (
        <button type="button" onClick={() => void doc.refetch()}>
          Reload document
        </button>
      )}
    </>
  );
}

function EffectivePicker({ value, onApply }: { value: EffectiveQuery; onApply: (ids: EffectiveQuery) => void }) {
  const ids = { team: useId(), workflow: useId(), step: useId() };
  const [draft, setDraft] = useState(value);
  return (
    <form
      className="filters"
      aria-label="Choose the effective config's scopes"
      onSubmit={(event) => {
        event.preventDefault();
        onApply({
          team_id: draft.team_id.trim(),
          workflow_id: draft.workflow_id.trim(),
          step_id: draft.step_id.trim(),
        });
      }}
    >
      <div className="field">
        <label htmlFor={ids.team}>Team ID</label>
        <input id={ids.team} value={draft.team_id} onChange={(e) => setDraft({ ...draft, team_id: e.target.value })} />
      </div>
      <div className="field">
        <label htmlFor={ids.workflow}>Workflow ID</label>
        <input
          id={ids.workflow}
          value={draft.workflow_id}
          onChange={(e) => setDraft({ ...draft, workflow_id: e.target.value })}
        />
      </div>
      <div className="field">
        <label htmlFor={ids.step}>Step ID</label>
        <input id={ids.step} value={draft.step_id} onChange={(e) => setDraft({ ...draft, step_id: e.target.value })} />
      </div>
      <button type="submit">Show effective config</button>
    </form>
  );
}

function EffectiveView({ ids }: { ids: EffectiveQuery }) {
  const effective = useEffectiveConfig(ids, true);
  if (effective.isPending) return <Loading label="Loading the effective config…" />;
  if (effective.isError) return <ErrorState error={effective.error} retry={() => void effective.refetch()} />;
  const { version, hash, data } = effective.data;
  return (
    <>
      <dl className="facts">
        <div className="facts-row">
          <dt>Version</dt>
          <dd className="mono">{version}</dd>
        </div>
        <div className="facts-row">
          <dt>Hash</dt>
          <dd className="mono">{hash}</dd>
        </div>
      </dl>
      <JsonView value={data ?? {}} label="Merged data" />
    </>
  );
}

/** Config documents by scope, an editor for one, and the config they merge into. */
export function ConfigPage() {
  const me = useMe();
  const { can } = useCapabilities();
  const [target, setTarget] = useState<Target | null>(null);
  const [effective, setEffective] = useState<EffectiveQuery>(NO_IDS);
  const readId = useId();

  if (me.isPending) {
    return (
      <Page title="Config">
        <Loading label="Checking what the signed-in key may do…" />
      </Page>
    );
  }
  if (me.isError) {
    return (
      <Page title="Config">
        <ErrorState error={me.error} retry={() => void me.refetch()} />
      </Page>
    );
  }
  const read = can('config.read');
  if (!read.allowed) {
    return (
      <Page title="Config">
        <EmptyState title="Config is not available to this key">
          <Unavailable id={readId} reason={read.reason} />
        </EmptyState>
      </Page>
    );
  }

  return (
    <Page title="Config">
      <ScopePicker
        onLoad={(next) => {
          setTarget(next);
          setEffective(effectiveIdsFor(next));
        }}
      />
      <div className="data-columns">
        <section aria-labelledby="config-document" className="data-section">
          <h2 id="config-document">
            Document
            {target ? `: ${target.scope}${target.id ? ` ${target.id}` : ''}` : ''}
          </h2>
          {target ? (
            <DocumentView key={`${target.scope}/${target.id}`} target={target} />
          ) : (
            <p className="muted">Choose a scope and load its document.</p>
          )}
        </section>
        <section aria-labelledby="config-effective" className="data-section">
          <h2 id="config-effective">Effective config</h2>
          <p className="data-hint">
            System, org, team, workflow and step documents merged, in that order: what a job of these scopes runs
            with.
          </p>
          <EffectivePicker key={JSON.stringify(effective)} value={effective} onApply={setEffective} />
          <EffectiveView ids={effective} />
        </section>
      </div>
    </Page>
  );
}
