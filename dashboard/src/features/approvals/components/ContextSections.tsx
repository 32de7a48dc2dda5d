import { useId, type ReactNode } from 'react';
import { Link } from 'react-router';

import { formatJson, formatTime, JsonView, StatusBadge } from '@/components';

import type { ApprovalContext } from '../api';
import { microsToIso } from '../countdown';

/** One titled part of the context; `empty` is shown when it has nothing to say. */
export function Section({
  title,
  empty,
  children,
}: {
  title: string;
  /** What is shown instead of `children` when the context has nothing for this part. */
  empty?: string;
  children?: ReactNode;
}) {
  const headingId = useId();
  return (
    <section className="card context-section" aria-labelledby={headingId}>
      <h2 id={headingId}>{title}</h2>
      {empty ? <p className="muted context-empty">{empty}</p> : children}
    </section>
  );
}

function Fact({ term, children }: { term: string; children: ReactNode }) {
  return (
    <div className="facts-row">
      <dt>{term}</dt>
      <dd>{children}</dd>
    </div>
  );
}

function Names({ label, names }: { label: string; names: string[] }) {
  if (names.length === 0) return null;
  return (
    <Fact term={label}>
      <ul className="tag-list">
        {names.map((name) => (
          <li key={name} className="tag mono">
            {name}
          </li>
        ))}
      </ul>
    </Fact>
  );
}

/** An input preview: pretty JSON when it parses, else the text as it is. */
function preview(text: string): string {
  try {
    return formatJson(JSON.parse(text));
  } catch {
    return text;
  }
}

const filled = (value: unknown) => value !== null && value !== undefined && value !== '';

export function WhatWillRun({ context }: { context: ApprovalContext }) {
  const run = context.what_will_run ?? {};
  const labels = Object.entries(run.labels ?? {});
  const gateInput = context.kind === 'workflow_approval_context' ? context.decision : undefined;
  const has =
    filled(run.topic) || filled(run.capability) || filled(run.input_preview) || run.input_withheld || labels.length > 0;
  if (!has && gateInput === undefined) {
    return <Section title="What will run" empty="Nothing is recorded about what this job would run." />;
  }
  return (
    <Section title="What will run">
      <dl className="facts">
        {run.topic && (
          <Fact term="Topic">
            <span className="mono">{run.topic}</span>
          </Fact>
        )}
        {run.capability && <Fact term="Capability">{run.capability}</Fact>}
        {run.principal && (
          <Fact term="Submitted by">
            <span className="mono">{run.principal}</span>
          </Fact>
        )}
        {run.priority !== undefined && <Fact term="Priority">{run.priority}</Fact>}
        {run.run_id && (
          <Fact term="Workflow step">
            <Link to={`/runs/${encodeURIComponent(run.run_id)}`}>Run {run.run_id}</Link>
            {run.workflow_id && <> of {run.workflow_id}</>}
            {run.step_id && <>, step {run.step_id}</>}
          </Fact>
        )}
        {run.input_size_bytes !== undefined && <Fact term="Input size">{run.input_size_bytes} bytes</Fact>}
      </dl>
      {labels.length > 0 && (
        <div className="table-wrap">
          <table className="data-table">
            <caption className="visually-hidden">Labels of the job</caption>
            <thead>
              <tr>
                <th scope="col">Label</th>
                <th scope="col">Value</th>
              </tr>
            </thead>
            <tbody>
              {labels.map(([key, value]) => (
                <tr key={key}>
                  <th scope="row" className="mono">
                    {key}
                  </th>
                  <td className="mono">{value}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {run.labels_truncated && <p className="muted">More labels exist than are shown.</p>}
        </div>
      )}
      {run.input_withheld ? (
        <p className="notice notice-warning">
          <span aria-hidden="true">■ </span>
          The input is withheld{run.input_withheld_reason ? `: ${run.input_withheld_reason}` : '.'}
        </p>
      ) : run.input_preview ? (
        <>
          <JsonView value={preview(run.input_preview)} label="Input" />
          {run.input_truncated && <p className="muted">The input is longer; only its beginning is shown.</p>}
        </>
      ) : (
        <p className="muted">The job carries no input.</p>
      )}
      {gateInput !== undefined && <JsonView value={gateInput} label="Input the gate evaluated" />}
    </Section>
  );
}

export function WhyGated({ context }: { context: ApprovalContext }) {
  const why = context.why_gated ?? {};
  const rule = context.policy_snapshot_summary?.matched_rule ?? {};
  const summary = context.decision_summary ?? {};
  const ruleId = why.rule_id || rule.id || context.approval?.policy_rule_id;
  const reason = why.reason || rule.description || context.approval?.policy_reason;
  const verdict = why.decision || rule.decision || context.approval?.decision;
  const snapshot = why.snapshot || context.policy_snapshot_summary?.policy_version;
  const constraints = why.constraints ?? context.constraints;
  const hasConstraints = constraints && Object.keys(constraints).length > 0;
  if (!ruleId && !reason && !verdict && !summary.why) {
    return <Section title="Why it is gated" empty="No policy rule or reason is recorded for this gate." />;
  }
  return (
    <Section title="Why it is gated">
      {summary.why && summary.why !== reason && <p>{summary.why}</p>}
      <dl className="facts">
        {reason && <Fact term="Reason">{reason}</Fact>}
        {ruleId && (
          <Fact term="Policy rule">
            <span className="mono">{ruleId}</span>
          </Fact>
        )}
        {verdict && (
          <Fact term="Verdict">
            <StatusBadge status={verdict} />
          </Fact>
        )}
        {snapshot && (
          <Fact term="Policy snapshot">
            <span className="mono">{snapshot}</span>
          </Fact>
        )}
        {rule.constraints_summary && <Fact term="Constraints">{rule.constraints_summary}</Fact>}
      </dl>
      {hasConstraints && <JsonView value={constraints} label="Constraints of the verdict" />}
    </Section>
  );
}

export function BlastRadius({ context }: { context: ApprovalContext }) {
  const blast = context.blast_radius ?? {};
  const systems = blast.systems ?? [];
  const namespaces = blast.namespaces ?? [];
  const resources = blast.resources ?? [];
  const named = systems.length + namespaces.length + resources.length > 0;
  return (
    <Section
      title="Blast radius"
      empty={named || blast.scope_description ? undefined : 'The job names no system, namespace or resource it affects.'}
    >
      {blast.scope_description && <p>{blast.scope_description}</p>}
      {named ? (
        <dl className="facts">
          <Names label="Systems" names={systems} />
          <Names label="Namespaces" names={namespaces} />
          <Names label="Resources" names={resources} />
        </dl>
      ) : (
        <p className="muted context-empty">The job names no system, namespace or resource it affects.</p>
      )}
    </Section>
  );
}

export function Risk({ context }: { context: ApprovalContext }) {
  const risk = context.risk ?? {};
  const tags = risk.risk_tags ?? [];
  const requires = risk.requires ?? [];
  if (tags.length === 0 && requires.length === 0 && !risk.capability) {
    return <Section title="Risk" empty="No risk tags, requirements or capability are recorded for this job." />;
  }
  return (
    <Section title="Risk">
      <dl className="facts">
        {tags.length === 0 ? <Fact term="Risk tags">none</Fact> : <Names label="Risk tags" names={tags} />}
        <Names label="Requires" names={requires} />
        {risk.capability && <Fact term="Capability">{risk.capability}</Fact>}
      </dl>
    </Section>
  );
}

export function PriorDecisions({ context }: { context: ApprovalContext }) {
  const priors = context.prior_approvals ?? [];
  if (priors.length === 0) {
    return (
      <Section
        title="Prior decisions"
        empty="No earlier decision is recorded for this topic and submitter."
      />
    );
  }
  return (
    <Section title="Prior decisions">
      <p className="muted">The latest decisions on the same topic for the same submitter, newest first.</p>
      <div className="table-wrap">
        <table className="data-table">
          <caption className="visually-hidden">Earlier decisions on this topic</caption>
          <thead>
            <tr>
              <th scope="col">Job</th>
              <th scope="col">Decision</th>
              <th scope="col">Decided by</th>
              <th scope="col">Decided</th>
            </tr>
          </thead>
          <tbody>
            {priors.map((prior) => (
              <tr key={prior.job_id}>
                <td className="cell-id">
                  <Link to={`/jobs/${encodeURIComponent(prior.job_id ?? '')}`}>{prior.job_id}</Link>
                </td>
                <td>
                  <StatusBadge status={prior.decision ?? (prior.was_approved ? 'APPROVED' : 'REJECTED')} />
                </td>
                <td className="mono">{prior.resolved_by || 'unknown'}</td>
                <td>{formatTime(microsToIso(prior.resolved_at))}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </Section>
  );
}

export function RollbackGuidance({ context }: { context: ApprovalContext }) {
  const hint = context.rollback?.hint ?? context.rollback_hint;
  const compensation = context.rollback?.compensation;
  if (!hint && !compensation?.topic) {
    return (
      <Section
        title="Rollback guidance"
        empty="No rollback hint or compensation is recorded: know how this would be undone before approving."
      />
    );
  }
  return (
    <Section title="Rollback guidance">
      <dl className="facts">
        {hint && <Fact term="Hint">{hint}</Fact>}
        {compensation?.topic && (
          <Fact term="Compensation">
            Runs <span className="mono">{compensation.topic}</span> if the run is rolled back
            {compensation.context_ptr && (
              <>
                {' '}
                (input <span className="mono">{compensation.context_ptr}</span>)
              </>
            )}
            .
          </Fact>
        )}
      </dl>
    </Section>
  );
}
