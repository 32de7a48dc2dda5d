import type { JobDetail, SafetyDecision } from './types';

export type TimelineEntry = { at: string; what: string; detail?: string };

function time(value: unknown): number {
  return typeof value === 'string' ? Date.parse(value) : Number.NaN;
}

/**
 * What happened to a job, oldest first, from what its detail and decisions record:
 * its submission, each policy decision, the approval, its start and its end.
 */
export function jobTimeline(job: JobDetail, decisions: SafetyDecision[] = []): TimelineEntry[] {
  const entries: TimelineEntry[] = [];
  if (job.created_at) entries.push({ at: job.created_at, what: 'Submitted', detail: job.topic });
  const seen = new Set<string>();
  for (const d of [...decisions, ...(job.decisions ?? [])]) {
    if (!d.evaluated_at) continue;
    const key = `${d.evaluated_at}|${d.action}|${d.rule_id}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const rule = d.rule_id ? ` (rule ${d.rule_id})` : '';
    entries.push({ at: d.evaluated_at, what: `Policy: ${d.action ?? 'decision'}${rule}`, detail: d.reason || undefined });
  }
  if (job.approval_at) {
    const status = (job.approval_status ?? 'decided').toLowerCase();
    const by = job.approval_by ? ` by ${job.approval_by}` : '';
    entries.push({ at: job.approval_at, what: `Approval ${status}${by}`, detail: job.approval_reason || undefined });
  }
  if (job.started_at) entries.push({ at: job.started_at, what: 'Running' });
  if (job.completed_at) {
    entries.push({ at: job.completed_at, what: `Finished: ${job.state ?? ''}`, detail: job.error ?? undefined });
  } else if (job.updated_at && job.updated_at !== job.created_at) {
    entries.push({ at: job.updated_at, what: `Now ${job.state ?? ''}` });
  }
  return entries
    .map((entry, index) => ({ entry, index }))
    .sort((a, b) => {
      const ta = time(a.entry.at);
      const tb = time(b.entry.at);
      if (Number.isNaN(ta) || Number.isNaN(tb) || ta === tb) return a.index - b.index;
      return ta - tb;
    })
    .map(({ entry }) => entry);
}
