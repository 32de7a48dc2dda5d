import { useId, useState, type FormEvent } from 'react';

import {
  EmptyState,
  ErrorState,
  formatTime,
  JsonView,
  Loading,
  Page,
  Pager,
  useCursorPages,
} from '@/components';
import { ApiError, describeError } from '@/lib/api';
import { useCapabilities } from '@/lib/capabilities';

import '../data.css';
import {
  decodeContent,
  RETENTIONS,
  TEXT_LIMIT,
  useArtifact,
  useArtifacts,
  useCreateArtifact,
  type ArtifactItem,
} from '../api';
import { formatBytes } from '../format';
import { SubmitRow } from './SubmitRow';

function UploadForm({ onCreated }: { onCreated: (ptr: string) => void }) {
  const { can } = useCapabilities();
  const verdict = can('artifacts.write');
  const create = useCreateArtifact();
  const ids = { content: useId(), type: useId(), retention: useId() };
  const [content, setContent] = useState('');
  const [contentType, setContentType] = useState('text/plain');
  const [retention, setRetention] = useState('standard');

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    if (!verdict.allowed || !content) return;
    create.mutate(
      { content, content_type: contentType.trim(), retention },
      {
        onSuccess: (made) => {
          setContent('');
          if (made.artifact_ptr) onCreated(made.artifact_ptr);
        },
      },
    );
  }

  return (
    <form className="data-form" onSubmit={submit} aria-label="Store an artifact">
      <div className="field">
        <label htmlFor={ids.content}>Content (text)</label>
        <textarea
          id={ids.content}
          rows={5}
          value={content}
          required
          disabled={!verdict.allowed}
          onChange={(e) => setContent(e.target.value)}
        />
      </div>
      <div className="filters">
        <div className="field">
          <label htmlFor={ids.type}>Content type</label>
          <input
            id={ids.type}
            value={contentType}
            maxLength={255}
            disabled={!verdict.allowed}
            onChange={(e) => setContentType(e.target.value)}
          />
        </div>
        <div className="field">
          <label htmlFor={ids.retention}>Retention</label>
          <select
            id={ids.retention}
            value={retention}
            disabled={!verdict.allowed}
            onChange={(e) => setRetention(e.target.value)}
          >
            {RETENTIONS.map((r) => (
              <option key={r} value={r}>
                {r === 'short' ? 'short (1 day)' : r === 'standard' ? 'standard (7 days)' : 'audit (30 days)'}
              </option>
            ))}
          </select>
        </div>
      </div>
      <SubmitRow
        label="Store artifact"
        busyLabel="Storing…"
        busy={create.isPending}
        verdict={verdict}
        problems={[create.isError ? describeError(create.error) : '']}
        done={
          create.isSuccess && (
            <>
              Stored as <span className="mono">{create.data.artifact_ptr}</span> ({formatBytes(create.data.size_bytes)},{' '}
              {create.data.retention}).
            </>
          )
        }
      />
    </form>
  );
}

/** One artifact's content, as text (cut at 64 KiB), or its download link when S3 holds it. */
function ArtifactContent({ ptr }: { ptr: string }) {
  const artifact = useArtifact(ptr, true);
  if (artifact.isPending) return <Loading label="Loading the artifact…" />;
  if (artifact.isError) return <ErrorState error={artifact.error} retry={() => void artifact.refetch()} />;
  const data = artifact.data;
  const meta = data.metadata ?? {};
  return (
    <>
      <dl className="facts">
        <div className="facts-row">
          <dt>Pointer</dt>
          <dd className="mono">{data.artifact_ptr ?? ptr}</dd>
        </div>
        <div className="facts-row">
          <dt>Type</dt>
          <dd>{meta.content_type}</dd>
        </div>
        <div className="facts-row">
          <dt>Size</dt>
          <dd>{formatBytes(meta.size_bytes)}</dd>
        </div>
      </dl>
      {meta.labels && Object.keys(meta.labels).length > 0 && <JsonView value={meta.labels} label="Labels" />}
      {typeof data.content_base64 === 'string' ? (
        <TextContent base64={data.content_base64} />
      ) : data.download_url ? (
        <p>
          S3 holds this artifact; its content is not shown here.{' '}
          <a href={data.download_url} rel="noreferrer">
            Download it
          </a>{' '}
          (the link works until {formatTime(data.download_expires_at)}).
        </p>
      ) : (
        <p className="muted">The gateway sent no content for this artifact.</p>
      )}
    </>
  );
}

function TextContent({ base64 }: { base64: string }) {
  const { text, bytes, truncated } = decodeContent(base64);
  return (
    <>
      {truncated && (
        <p className="notice notice-warning" role="note">
          Only the first {formatBytes(TEXT_LIMIT)} of {formatBytes(bytes)} are shown.
        </p>
      )}
      <figure className="json-view">
        <figcaption className="json-label">Content, as text</figcaption>
        <pre className="data-content">{text}</pre>
      </figure>
    </>
  );
}

/** An item's pointer: as listed, or made from its id. */
function pointerOf(item: ArtifactItem): string {
  return item.artifact_ptr || (item.id ? `redis://art:${item.id}` : '');
}

function ArtifactTable({ items, selected, onSelect }: { items: ArtifactItem[]; selected: string; onSelect: (ptr: string) => void }) {
  return (
    <div className="table-wrap">
      <table className="data-table">
        <caption className="visually-hidden">Artifacts, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Pointer</th>
            <th scope="col">Type</th>
            <th scope="col">Size</th>
            <th scope="col">Retention</th>
            <th scope="col">Created</th>
            <th scope="col">Expires</th>
            <th scope="col">
              <span className="visually-hidden">Content</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {items.map((item) => {
            const ptr = pointerOf(item);
            return (
              <tr key={ptr}>
                <td className="cell-id">{ptr}</td>
                <td>{item.content_type}</td>
                <td>{formatBytes(item.size_bytes)}</td>
                <td>
                  {item.retention}
                  {item.storage === 's3' ? ' (S3)' : ''}
                </td>
                <td>{formatTime(item.created_at)}</td>
                <td>{formatTime(item.expires_at)}</td>
                <td>
                  <button
                    type="button"
                    aria-pressed={selected === ptr}
                    aria-label={`Show content of ${ptr}`}
                    onClick={() => onSelect(selected === ptr ? '' : ptr)}
                  >
                    Show
                  </button>
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}

function ArtifactList({ selected, onSelect }: { selected: string; onSelect: (ptr: string) => void }) {
  const { cursor, onFirstPage, pagerProps } = useCursorPages();
  const artifacts = useArtifacts(cursor);
  if (artifacts.isPending) return <Loading label="Loading artifacts…" />;
  if (artifacts.isError) {
    const error = artifacts.error;
    if (error instanceof ApiError && (error.status === 404 || error.status === 405)) {
      return (
        <p className="notice" role="note">
          This gateway does not list artifacts (it answered HTTP {error.status}). Open one by its pointer below.
        </p>
      );
    }
    return <ErrorState error={error} retry={() => void artifacts.refetch()} />;
  }
  const { items, nextCursor } = artifacts.data;
  if (items.length === 0 && onFirstPage) {
    return <EmptyState title="No artifacts yet" description="Artifacts this tenant stores show up here until they expire." />;
  }
  return (
    <>
      <ArtifactTable items={items} selected={selected} onSelect={onSelect} />
      <Pager {...pagerProps(nextCursor)} />
    </>
  );
}

function OpenByPointer({ onOpen }: { onOpen: (ptr: string) => void }) {
  const inputId = useId();
  const [value, setValue] = useState('');
  return (
    <form
      className="filters"
      aria-label="Open an artifact by pointer"
      onSubmit={(event) => {
        event.preventDefault();
        if (value.trim()) onOpen(value.trim());
      }}
    >
      <div className="field">
        <label htmlFor={inputId}>Pointer or ID</label>
        <input
          id={inputId}
          className="mono trace-input"
          value={value}
          placeholder="redis://art:…"
          onChange={(e) => setValue(e.target.value)}
        />
      </div>
      <button type="submit">Open artifact</button>
    </form>
  );
}

/** The tenant's artifacts: the list, one artifact's content, and a form to store one. */
export function ArtifactsPage() {
  const [selected, setSelected] = useState('');
  return (
    <Page title="Artifacts">
      <section aria-labelledby="artifacts-list" className="data-section">
        <h2 id="artifacts-list">Stored artifacts</h2>
        <ArtifactList selected={selected} onSelect={setSelected} />
        <OpenByPointer onOpen={setSelected} />
      </section>
      {selected && (
        <section aria-labelledby="artifact-content" className="data-section">
          <h2 id="artifact-content">Artifact content</h2>
          <ArtifactContent key={selected} ptr={selected} />
          <button type="button" onClick={() => setSelected('')}>
            Close
          </button>
        </section>
      )}
      <section aria-labelledby="artifact-new" className="data-section">
        <h2 id="artifact-new">Store an artifact</h2>
        <p className="data-hint">Text content up to 4 MiB is stored inline. It expires with its retention class.</p>
        <UploadForm onCreated={setSelected} />
      </section>
    </Page>
  );
}
