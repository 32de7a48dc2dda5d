import { useMutation, useQuery } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from '@/lib/api';

export type ReplayRequest = Schemas['ReplayRequest'];
export type ReplayResult = Schemas['PolicyReplayResult'];
export type ReplayChange = Schemas['PolicyReplayChange'];
export type ReplaySummary = Schemas['PolicyReplaySummary'];
export type RuleHit = Schemas['PolicyRuleHit'];
export type AnalyticsResult = Schemas['PolicyAnalyticsResult'];
export type RuleAnalytics = Schemas['PolicyRuleAnalytics'];
export type AnalyticsSummary = Schemas['PolicyAnalyticsSummary'];
export type LatencyBucket = Schemas['PolicyLatencyBucket'];
export type BundleItem = Schemas['PolicyBundleItem'];

/** The widest window replay and analytics accept (the gateway answers 400 beyond it). */
export const MAX_WINDOW_MS = 7 * 24 * 3600 * 1000;
/** Jobs one replay call looks at: the gateway's ceiling. */
export const REPLAY_MAX_JOBS = 1000;
/** Changes one replay call answers: the gateway's ceiling. */
export const REPLAY_CHANGES_LIMIT = 1000;
/** Changed jobs shown per page of the table. */
export const CHANGES_PAGE_SIZE = 20;

// -- windows -----------------------------------------------------------------------------

function pad(n: number): string {
  return String(n).padStart(2, '0');
}

/** A time as a `datetime-local` input holds it: local time, to the minute. */
export function toLocalInput(date: Date): string {
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}`
  );
}

/** A `datetime-local` value (local time) as RFC 3339 in UTC; '' when it is not a time. */
export function toRfc3339(local: string): string {
  if (!local) return '';
  const date = new Date(local);
  return Number.isNaN(date.getTime()) ? '' : date.toISOString();
}

export type LocalWindow = { from: string; to: string };

/** The last `hours` hours, ending at the next whole minute (so `now` is inside it). */
export function lastHours(hours: number, now: Date = new Date()): LocalWindow {
  const end = new Date(now.getTime());
  end.setSeconds(0, 0);
  end.setMinutes(end.getMinutes() + 1);
  const start = new Date(end.getTime() - hours * 3600 * 1000);
  return { from: toLocalInput(start), to: toLocalInput(end) };
}

/** What is wrong with a window, '' when the gateway will take it. */
export function windowProblem({ from, to }: LocalWindow): string {
  const start = toRfc3339(from);
  const end = toRfc3339(to);
  if (!start) return 'Give the start of the window.';
  if (!end) return 'Give the end of the window.';
  const span = Date.parse(end) - Date.parse(start);
  if (span <= 0) return 'The start must be before the end.';
  if (span > MAX_WINDOW_MS) return 'The window may span at most 7 days.';
  return '';
}

// -- replay ------------------------------------------------------------------------------

export type Candidate = { kind: 'bundle'; bundleId: string } | { kind: 'content'; content: string };

export type ReplayForm = LocalWindow & {
  candidate: Candidate;
  topicPattern: string;
  originalDecision: string;
};

/** The body of POST /api/v1/policy/replay for what the form says. */
export function replayBody(form: ReplayForm, cursor?: string): ReplayRequest {
  const body: ReplayRequest = {
    from: toRfc3339(form.from),
    to: toRfc3339(form.to),
    max_jobs: REPLAY_MAX_JOBS,
    limit: REPLAY_CHANGES_LIMIT,
  };
  if (form.candidate.kind === 'bundle') body.candidate_bundle_id = form.candidate.bundleId;
  else body.candidate_content = form.candidate.content;
  const filters: NonNullable<ReplayRequest['filters']> = {};
  if (form.topicPattern.trim()) filters.topic_pattern = form.topicPattern.trim();
  if (form.originalDecision) filters.original_decision = form.originalDecision;
  if (Object.keys(filters).length > 0) body.filters = filters;
  if (cursor) body.cursor = cursor;
  return body;
}

const SUMMARY_KEYS = ['total_jobs', 'evaluated', 'escalated', 'relaxed', 'unchanged', 'errored', 'scanned'] as const;
export type SummaryKey = (typeof SUMMARY_KEYS)[number];
export type Totals = Record<SummaryKey, number>;

/** A replay read so far: the calls' answers put together (each call counts its own jobs). */
export type ReplayRun = {
  totals: Totals;
  changes: ReplayChange[];
  ruleHits: RuleHit[];
  warnings: string[];
  errors: { job_id?: string; error?: string }[];
  nextCursor: string | null;
  stoppedBy: string | null;
  policySnapshot: string;
};

export function emptyRun(): ReplayRun {
  return {
    totals: Object.fromEntries(SUMMARY_KEYS.map((k) => [k, 0])) as Totals,
    changes: [],
    ruleHits: [],
    warnings: [],
    errors: [],
    nextCursor: null,
    stoppedBy: null,
    policySnapshot: '',
  };
}

/** `run` with one more call's answer added. */
export function addPage(run: ReplayRun, page: ReplayResult): ReplayRun {
  const totals = { ...run.totals };
  for (const key of SUMMARY_KEYS) totals[key] += page.summary?.[key] ?? 0;
  const hits = new Map<string, RuleHit>();
  for (const hit of [...run.ruleHits, ...(page.rule_hits ?? [])]) {
    const key = `${hit.rule_id ?? ''}\u0000${hit.decision ?? ''}`;
    const seen = hits.get(key);
    hits.set(key, { ...hit, count: (seen?.count ?? 0) + (hit.count ?? 0) });
  }
  const ruleHits = [...hits.values()].sort(
    (a, b) => (b.count ?? 0) - (a.count ?? 0) || (a.rule_id ?? '').localeCompare(b.rule_id ?? ''),
  );
  // The bound warning of the previous call is stale once the scan went on.
  const warnings = [...new Set([...run.warnings.filter((w) => !w.startsWith('stopped at')), ...(page.warnings ?? [])])];
  return {
    totals,
    changes: [...run.changes, ...(page.changes ?? [])],
    ruleHits,
    warnings,
    errors: [...run.errors, ...((page.errors ?? []) as ReplayRun['errors'])],
    nextCursor: page.next_cursor ?? null,
    stoppedBy: page.stopped_by ?? null,
    policySnapshot: page.policy_snapshot ?? run.policySnapshot,
  };
}

/** Jobs whose decision would change: escalated or relaxed. */
export function changedCount(totals: Totals): number {
  return totals.escalated + totals.relaxed;
}

export function useReplay() {
  const api = useApi();
  return useMutation({
    mutationFn: (body: ReplayRequest) => unwrap(api.POST('/api/v1/policy/replay', { body })),
  });
}

/** The stored bundles; drafts are those not in force. */
export function useBundles(enabled: boolean) {
  const api = useApi();
  return useQuery({
    queryKey: ['policy-bundles'],
    queryFn: async () => {
      const list = await unwrap(api.GET('/api/v1/policy/bundles'));
      return list.items ?? [];
    },
    enabled,
  });
}

// -- analytics ---------------------------------------------------------------------------

export function useAnalytics(span: { from: string; to: string } | null) {
  const api = useApi();
  return useQuery({
    queryKey: ['policy-analytics', span?.from ?? '', span?.to ?? ''],
    queryFn: () => unwrap(api.POST('/api/v1/policy/analytics', { body: { from: span!.from, to: span!.to } })),
    enabled: span !== null,
  });
}

/** One bar of the latency histogram: the answers between the bound before and `le_ms`. */
export type LatencyBar = { label: string; le_ms: number | null; count: number; cumulative: number };

/** A duration in ms as "1 s", "10 min", "1 h", "1 d". */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${+(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${+(ms / 60_000).toFixed(1)} min`;
  if (ms < 86_400_000) return `${+(ms / 3_600_000).toFixed(1)} h`;
  return `${+(ms / 86_400_000).toFixed(1)} d`;
}

/**
 * The gateway's cumulative buckets (each counts the answers at or under its bound, the
 * last, `le_ms: null`, all of them) as the count in each bucket alone.
 */
export function latencyBars(buckets: LatencyBucket[] | undefined): LatencyBar[] {
  const bars: LatencyBar[] = [];
  let before = 0;
  let lower: number | null = null;
  for (const bucket of buckets ?? []) {
    const cumulative = bucket.count ?? 0;
    const bound = bucket.le_ms ?? null;
    let label: string;
    if (bound === null) label = lower === null ? 'any' : `over ${formatMs(lower)}`;
    else if (lower === null) label = `up to ${formatMs(bound)}`;
    else label = `${formatMs(lower)} to ${formatMs(bound)}`;
    bars.push({ label, le_ms: bound, count: Math.max(0, cumulative - before), cumulative });
    before = cumulative;
    if (bound !== null) lower = bound;
  }
  return bars;
}

/** part / whole, 0 when whole is 0. */
export function rate(part: number, whole: number): number {
  return whole > 0 ? part / whole : 0;
}

export function percent(value: number): string {
  return `${+(value * 100).toFixed(1)}%`;
}
