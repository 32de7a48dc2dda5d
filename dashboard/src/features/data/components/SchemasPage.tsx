import { useId, useState, type FormEvent } from 'react';

import {
  ConfirmButton,
  EmptyState,
  ErrorState,
  formatTime,
  JsonView,
  Loading,
  Page,
  Pager,
  StatusBadge,
  Unavailable,
  useCursorPages,
} from '@/components';
import { describeError } from '@/lib/api';
import { useCapabilities, type Verdict } from '@/lib/capabilities';

import '../data.css';
import {
  deleteSchemaError,
  useDeleteSchema,
  useRegisterSchema,
  useSchemas,
  useTopics,
  type SchemaRecord,
} from '../api';
import { SubmitRow } from './SubmitRow';

/** The text of a schema document, parsed: the object, or why it is not one. */
export function parseSchema(text: string): { schema?: Record<string, unknown>; error?: string } {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { error: `The schema is not valid JSON: ${error instanceof Error ? error.message : String(error)}` };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return { error: 'The schema must be a JSON object.' };
  }
  return { schema: value as Record<string, unknown> };
}

function DeleteSchema({ id, verdict, whyId }: { id: string; verdict: Verdict; whyId: string }) {
  const remove = useDeleteSchema();
  return (
    <div className="row-actions">
      {verdict.allowed ? (
        <ConfirmButton
          onConfirm={() => remove.mutate(id)}
          disabled={remove.isPending}
          question={`Delete schema ${id}? A topic that names it keeps it from being deleted.`}
          confirmLabel="Yes, delete schema"
        >
          Delete
        </ConfirmButton>
      ) : (
        <button type="button" disabled aria-describedby={whyId}>
          Delete
        </button>
      )}
      {remove.isError && (
        <p className="form-error" role="alert">
          {deleteSchemaError(remove.error)}
        </p>
      )}
    </div>
  );
}

function SchemaRow({ record, verdict, whyId }: { record: SchemaRecord; verdict: Verdict; whyId: string }) {
  const [open, setOpen] = useState(false);
  const sha = record.sha256 ?? '';
  return (
    <>
      <tr>
        <td className="cell-id">{record.id}</td>
        <td className="mono" title={sha}>
          {sha.slice(0, 12)}
        </td>
        <td>{formatTime(typeof record.updated_at === 'string' ? record.updated_at : '')}</td>
        <td>
          <button
            type="button"
            aria-expanded={open}
            aria-label={`${open ? 'Hide' : 'Show'} schema ${record.id}`}
            onClick={() => setOpen(!open)}
          >
            {open ? 'Hide' : 'Show'}
          </button>
        </td>
        <td>
          <DeleteSchema id={record.id} verdict={verdict} whyId={whyId} />
        </td>
      </tr>
      {open && (
        <tr>
          <td colSpan={5}>
            <JsonView value={record.schema} label={`Schema ${record.id}`} />
          </td>
        </tr>
      )}
    </>
  );
}

function SchemaList() {
  const { can } = useCapabilities();
  const verdict = can('schemas.write');
  const whyId = useId();
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const schemas = useSchemas(cursor);
  if (schemas.isPending) return <Loading label="Loading schemas…" />;
  if (schemas.isError) return <ErrorState error={schemas.error} retry={() => void schemas.refetch()} />;
  const { items, nextCursor } = schemas.data;
  if (items.length === 0 && onFirstPage) {
    return <EmptyState title="No schemas yet" description="A registered schema can check the input of a topic's jobs." />;
  }
  return (
    <>
      <Unavailable id={whyId} reason={verdict.allowed ? '' : verdict.reason} />
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Schemas, by id</caption>
          <thead>
            <tr>
              <th scope="col">ID</th>
              <th scope="col">SHA-256</th>
              <th scope="col">Registered</th>
              <th scope="col">Document</th>
              <th scope="col">
                <span className="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {items.map((record) => (
              <SchemaRow key={record.id} record={record} verdict={verdict} whyId={whyId} />
            ))}
          </tbody>
        </table>
      </div>
      <Pager {...pagerProps(nextCursor)} />
    </>
  );
}

const EXAMPLE = '{\n  "type": "object",\n  "properties": {}\n}';

function RegisterSchema() {
  const { can } = useCapabilities();
  const verdict = can('schemas.write');
  const register = useRegisterSchema();
  const ids = { id: useId(), doc: useId() };
  const [id, setId] = useState('');
  const [text, setText] = useState(EXAMPLE);
  const [problem, setProblem] = useState('');

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    if (!verdict.allowed) return;
    const parsed = parseSchema(text);
    if (!parsed.schema) {
      setProblem(parsed.error ?? '');
      return;
    }
    setProblem('');
    register.mutate({ id: id.trim(), schema: parsed.schema });
  }

  return (
    <form className="data-form" onSubmit={submit} aria-label="Register a schema">
      <div className="field">
        <label htmlFor={ids.id}>Schema ID</label>
        <input
          id={ids.id}
          value={id}
          required
          maxLength={128}
          disabled={!verdict.allowed}
          onChange={(e) => setId(e.target.value)}
        />
      </div>
      <div className="field">
        <label htmlFor={ids.doc}>JSON Schema</label>
        <textarea
          id={ids.doc}
          rows={8}
          value={text}
          disabled={!verdict.allowed}
          onChange={(e) => setText(e.target.value)}
        />
      </div>
      <p className="data-hint">Registering an ID that exists replaces its schema.</p>
      <SubmitRow
        label="Register schema"
        busyLabel="Registering…"
        busy={register.isPending}
        verdict={verdict}
        problems={[problem, register.isError ? describeError(register.error) : '']}
        done={register.isSuccess && <>Schema {register.variables?.id} registered.</>}
      />
    </form>
  );
}

function TopicList() {
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const topics = useTopics(cursor);
  if (topics.isPending) return <Loading label="Loading topics…" />;
  if (topics.isError) return <ErrorState error={topics.error} retry={() => void topics.refetch()} />;
  const { items, nextCursor } = topics.data;
  if (items.length === 0 && onFirstPage) {
    return <EmptyState title="No topics registered" description="Without registrations, a topic's input is not checked." />;
  }
  return (
    <>
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Registered topics, by name</caption>
          <thead>
            <tr>
              <th scope="col">Topic</th>
              <th scope="col">Status</th>
              <th scope="col">Input schema</th>
              <th scope="col">Output schema</th>
              <th scope="col">Pool</th>
            </tr>
          </thead>
          <tbody>
            {items.map((topic) => (
              <tr key={topic.name}>
                <td className="cell-id">{topic.name}</td>
                <td>
                  <StatusBadge status={topic.status} />
                </td>
                <td className="mono">{topic.input_schema_id || <span className="muted">none</span>}</td>
                <td className="mono">{topic.output_schema_id || <span className="muted">none</span>}</td>
                <td>{topic.pool}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager {...pagerProps(nextCursor)} />
    </>
  );
}

/** The tenant's JSON schemas and the topics that name them. */
export function SchemasPage() {
  return (
    <Page title="Schemas">
      <section aria-labelledby="schemas-list" className="data-section">
        <h2 id="schemas-list">Registered schemas</h2>
        <SchemaList />
      </section>
      <section aria-labelledby="schemas-new" className="data-section">
        <h2 id="schemas-new">Register a schema</h2>
        <RegisterSchema />
      </section>
      <section aria-labelledby="schemas-topics" className="data-section">
        <h2 id="schemas-topics">Topics</h2>
        <TopicList />
      </section>
    </Page>
  );
}
