import { useId } from 'react';

import { ErrorState, Loading, Unavailable } from '@/components';
import { useCapabilities } from '@/lib/capabilities';

import { useBundles, type Candidate } from '../api';

/** The candidate policy of a replay: a stored draft bundle, or bundle content pasted in. */
export function CandidatePicker({ candidate, onChange }: { candidate: Candidate; onChange: (c: Candidate) => void }) {
  const { can, me } = useCapabilities();
  const read = can('policy.read');
  const bundles = useBundles(read.allowed);
  const name = useId();
  const readReason = useId();
  const selectId = useId();
  const drafts = (bundles.data ?? []).filter((b) => b.enabled === false && b.id);

  let bundleField;
  if (!me) bundleField = <Loading label="Loading the bundles…" />;
  else if (!read.allowed) {
    bundleField = (
      <>
        <div className="field">
          <label htmlFor={selectId}>Draft bundle</label>
          <select id={selectId} disabled aria-describedby={readReason} value="">
            <option value="">No bundles listed</option>
          </select>
        </div>
        <Unavailable id={readReason} reason={read.reason} />
      </>
    );
  } else if (bundles.isPending) bundleField = <Loading label="Loading the bundles…" />;
  else if (bundles.isError) {
    bundleField = <ErrorState title="The bundles could not be listed" error={bundles.error} retry={() => void bundles.refetch()} />;
  } else if (drafts.length === 0) {
    bundleField = (
      <p className="govern-muted">
        There is no draft bundle (a bundle saved but not in force). Paste bundle content instead.
      </p>
    );
  } else {
    bundleField = (
      <div className="field">
        <label htmlFor={selectId}>Draft bundle</label>
        <select
          id={selectId}
          value={candidate.kind === 'bundle' ? candidate.bundleId : ''}
          onChange={(e) => onChange({ kind: 'bundle', bundleId: e.target.value })}
        >
          <option value="">Choose a draft…</option>
          {drafts.map((b) => (
            <option key={b.id} value={b.id}>
              {b.id}
              {b.rule_count !== undefined ? ` (${b.rule_count} ${b.rule_count === 1 ? 'rule' : 'rules'})` : ''}
            </option>
          ))}
        </select>
      </div>
    );
  }

  return (
    <fieldset className="govern-fieldset">
      <legend>Candidate policy</legend>
      <div className="govern-choices">
        <label>
          <input
            type="radio"
            name={name}
            checked={candidate.kind === 'bundle'}
            onChange={() => onChange({ kind: 'bundle', bundleId: '' })}
          />{' '}
          A draft bundle
        </label>
        <label>
          <input
            type="radio"
            name={name}
            checked={candidate.kind === 'content'}
            onChange={() => onChange({ kind: 'content', content: '' })}
          />{' '}
          Pasted bundle content
        </label>
      </div>
      {candidate.kind === 'bundle' ? (
        bundleField
      ) : (
        <label className="field">
          Bundle content (YAML)
          <textarea
            rows={10}
            spellCheck={false}
            className="govern-yaml"
            value={candidate.content}
            placeholder={'rules:\n  - id: my-rule\n    match: {topics: [job.example]}\n    decision: deny'}
            onChange={(e) => onChange({ kind: 'content', content: e.target.value })}
          />
        </label>
      )}
    </fieldset>
  );
}
