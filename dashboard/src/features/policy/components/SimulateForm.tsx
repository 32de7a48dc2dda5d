import { useId, useState, type FormEvent } from 'react';

import { StatusBadge } from '@/components';
import { describeError } from '@/lib/api';
import type { Verdict } from '@/lib/capabilities';

import { useSimulate, type CheckRequest } from '../api';
import { Refused } from './Refused';

export type SimulateFormProps = {
  bundleId: string;
  /** The editor's text: tried as this bundle, in force. */
  content: string;
  verdict: Verdict;
};

/** The request a simulation sends, from the form's fields; a string says what is wrong. */
export function simulationRequest(fields: {
  topic: string;
  capability: string;
  riskTags: string;
  labels: string;
}): CheckRequest | string {
  const topic = fields.topic.trim();
  if (!topic) return 'Give the topic of the job to decide.';
  const request: CheckRequest = { topic };
  const capability = fields.capability.trim();
  if (capability) request.capability = capability;
  const tags = fields.riskTags
    .split(',')
    .map((tag) => tag.trim())
    .filter(Boolean);
  if (tags.length) request.risk_tags = tags;
  if (fields.labels.trim()) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(fields.labels);
    } catch {
      return 'Labels must be a JSON object, e.g. {"env": "prod"}.';
    }
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      return 'Labels must be a JSON object, e.g. {"env": "prod"}.';
    }
    const labels: Record<string, string> = {};
    for (const [key, value] of Object.entries(parsed)) {
      if (typeof value !== 'string') return `Label ${key} must be a string.`;
      labels[key] = value;
    }
    if (Object.keys(labels).length) request.labels = labels;
  }
  return request;
}

/** Decides one job under the policy with this bundle as the editor holds it, in force. */
export function SimulateForm({ bundleId, content, verdict }: SimulateFormProps) {
  const [topic, setTopic] = useState('');
  const [capability, setCapability] = useState('');
  const [riskTags, setRiskTags] = useState('');
  const [labels, setLabels] = useState('');
  const [problem, setProblem] = useState('');
  const simulate = useSimulate(bundleId);
  const ids = { topic: useId(), capability: useId(), tags: useId(), labels: useId(), problem: useId() };

  function submit(event: FormEvent) {
    event.preventDefault();
    const request = simulationRequest({ topic, capability, riskTags, labels });
    if (typeof request === 'string') {
      setProblem(request);
      return;
    }
    setProblem('');
    simulate.mutate({ request, content });
  }

  const decision = simulate.data;
  return (
    <form className="policy-simulate" onSubmit={submit} noValidate>
      <div className="filters">
        <div className="field">
          <label htmlFor={ids.topic}>Topic</label>
          <input id={ids.topic} value={topic} onChange={(e) => setTopic(e.target.value)} placeholder="job.deploy.prod" />
        </div>
        <div className="field">
          <label htmlFor={ids.capability}>Capability (optional)</label>
          <input id={ids.capability} value={capability} onChange={(e) => setCapability(e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor={ids.tags}>Risk tags (optional, comma-separated)</label>
          <input id={ids.tags} value={riskTags} onChange={(e) => setRiskTags(e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor={ids.labels}>Labels (optional, JSON object)</label>
          <textarea id={ids.labels} rows={2} value={labels} onChange={(e) => setLabels(e.target.value)} />
        </div>
      </div>
      {verdict.allowed ? (
        <button type="submit" className="button-primary" disabled={simulate.isPending}>
          {simulate.isPending ? 'Simulating…' : 'Simulate'}
        </button>
      ) : (
        <Refused label="Simulate" reason={verdict.reason} />
      )}
      {problem && (
        <p className="form-error" id={ids.problem} role="alert">
          {problem}
        </p>
      )}
      {simulate.isError && (
        <p className="form-error" role="alert">
          The simulation failed: {describeError(simulate.error)}
        </p>
      )}
      <div aria-live="polite">
        {decision && !simulate.isPending && (
          <dl className="facts policy-decision" aria-label="Simulated decision">
            <dt>Decision</dt>
            <dd>
              <StatusBadge status={decision.decision ?? 'unknown'} />
            </dd>
            <dt>Rule</dt>
            <dd className="cell-id">{decision.rule_id || decision.ruleId || 'none'}</dd>
            <dt>Reason</dt>
            <dd>{decision.reason || 'No reason given.'}</dd>
            {(decision.policy_snapshot || decision.policySnapshot) && (
              <>
                <dt>Policy snapshot</dt>
                <dd className="cell-id">{decision.policy_snapshot || decision.policySnapshot}</dd>
              </>
            )}
          </dl>
        )}
      </div>
    </form>
  );
}
