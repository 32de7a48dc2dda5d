import { useId, useState } from 'react';

import { EmptyState, ErrorState, formatTime, Loading, Page, Unavailable } from '@/components';
import { useCapabilities } from '@/lib/capabilities';

import {
  formatMs,
  lastHours,
  percent,
  toRfc3339,
  useAnalytics,
  windowProblem,
  type AnalyticsResult,
  type LocalWindow,
} from '../api';
import '../govern.css';
import { ApprovalCharts, RuleHitsChart } from './AnalyticsCharts';
import { WindowFields } from './WindowFields';

type Preset = '1h' | '24h' | '7d' | 'custom';

const PRESETS: { value: Preset; label: string; hours: number }[] = [
  { value: '1h', label: 'Last hour', hours: 1 },
  { value: '24h', label: 'Last 24 hours', hours: 24 },
  { value: '7d', label: 'Last 7 days', hours: 24 * 7 },
];

type Span = { from: string; to: string };

/** The window of a preset, ending now. */
function presetSpan(preset: Preset, now: Date = new Date()): Span {
  const hours = PRESETS.find((p) => p.value === preset)?.hours ?? 24;
  return { from: new Date(now.getTime() - hours * 3600_000).toISOString(), to: now.toISOString() };
}

function Summary({ data }: { data: AnalyticsResult }) {
  const s = data.summary ?? {};
  return (
    <dl className="facts govern-summary" aria-label="Totals">
      <dt>Rules that decided jobs</dt>
      <dd>{s.total_rules ?? 0}</dd>
      <dt>Rule hits</dt>
      <dd data-testid="analytics-total-hits">{s.total_hits ?? 0}</dd>
      <dt>Approvals asked</dt>
      <dd>{s.approvals_asked ?? 0}</dd>
      <dt>Approved (overrides)</dt>
      <dd>{s.approved ?? 0}</dd>
      <dt>Rejected</dt>
      <dd>{s.rejected ?? 0}</dd>
      <dt>Override rate</dt>
      <dd>{percent(s.override_rate ?? 0)}</dd>
      <dt>Average approval latency</dt>
      <dd>{s.avg_approval_latency_ms == null ? 'none answered' : formatMs(s.avg_approval_latency_ms)}</dd>
      <dt>Most overridden rule</dt>
      <dd className="cell-id">{s.highest_override_rule_id || 'none'}</dd>
      <dt>Jobs read</dt>
      <dd>{data.scanned ?? 0}</dd>
    </dl>
  );
}

/** How the policy's rules decided the tenant's jobs, and how people answered the gates. */
export function AnalyticsPage() {
  const { can } = useCapabilities();
  const read = can('policy.read');
  const reasonId = useId();
  const [preset, setPreset] = useState<Preset>('24h');
  const [custom, setCustom] = useState<LocalWindow>(() => lastHours(24));
  const [problem, setProblem] = useState('');
  const [span, setSpan] = useState<Span>(() => presetSpan('24h'));
  const analytics = useAnalytics(read.allowed ? span : null);

  function choose(next: Preset) {
    setPreset(next);
    setProblem('');
    if (next !== 'custom') setSpan(presetSpan(next));
  }

  function show() {
    if (preset !== 'custom') {
      // A preset ends now: showing again moves it on.
      setSpan(presetSpan(preset));
      return;
    }
    const why = windowProblem(custom);
    setProblem(why);
    if (!why) setSpan({ from: toRfc3339(custom.from), to: toRfc3339(custom.to) });
  }

  let body;
  if (!read.allowed) body = null;
  else if (analytics.isPending) body = <Loading label="Loading the analytics…" />;
  else if (analytics.isError) body = <ErrorState error={analytics.error} retry={() => void analytics.refetch()} />;
  else {
    const data = analytics.data;
    const rules = data.rules ?? [];
    const range = data.time_range;
    body = (
      <>
        <p className="govern-muted">
          From {formatTime(range?.from ?? span.from)} to {formatTime(range?.to ?? span.to)}, over the jobs whose last
          state change falls in the window.
        </p>
        {data.truncated && (
          <p className="notice notice-warning">
            There were more jobs than one reading takes: the figures cover the newest {data.scanned} of them.
          </p>
        )}
        {rules.length === 0 ? (
          <EmptyState
            title="No rule decided a job in this window"
            description="Jobs the policy checked show up here by the rule that decided them."
          />
        ) : (
          <>
            <Summary data={data} />
            <RuleHitsChart rules={rules} />
            <ApprovalCharts rules={rules} summary={data.summary ?? {}} />
          </>
        )}
      </>
    );
  }

  return (
    <Page title="Policy analytics">
      <form
        className="govern-form card"
        aria-label="Analytics window"
        onSubmit={(e) => {
          e.preventDefault();
          show();
        }}
        noValidate
      >
        <fieldset className="govern-fieldset">
          <legend>Window</legend>
          <div className="govern-choices">
            {PRESETS.map((p) => (
              <label key={p.value}>
                <input
                  type="radio"
                  name="analytics-window"
                  value={p.value}
                  checked={preset === p.value}
                  onChange={() => choose(p.value)}
                />{' '}
                {p.label}
              </label>
            ))}
            <label>
              <input
                type="radio"
                name="analytics-window"
                value="custom"
                checked={preset === 'custom'}
                onChange={() => choose('custom')}
              />{' '}
              Custom
            </label>
          </div>
        </fieldset>
        {preset === 'custom' && (
          <WindowFields
            legend="Custom window"
            value={custom}
            onChange={setCustom}
            hint="At most 7 days, in your local time."
          />
        )}
        {problem && (
          <p className="form-error" role="alert">
            {problem}
          </p>
        )}
        <div className="row-actions">
          <button
            type="submit"
            className="button-primary"
            disabled={!read.allowed}
            aria-describedby={read.allowed ? undefined : reasonId}
          >
            {preset === 'custom' ? 'Show' : 'Refresh'}
          </button>
        </div>
        <Unavailable id={reasonId} reason={read.reason} />
      </form>
      {body}
    </Page>
  );
}
