/**
 * Every job of a trace on one time axis: where each job's bar starts and how wide it is,
 * as percentages of the span from the earliest creation to the latest end.
 */

export type TraceJobTimes = {
  id?: string;
  created_at?: string | null;
  updated_at?: string | null;
  started_at?: string | null;
  completed_at?: string | null;
};

export type TraceBar<T> = {
  job: T;
  /** Milliseconds since the epoch; NaN when the job has no usable creation time. */
  start: number;
  end: number;
  /** From the axis's start, in percent of the axis. */
  left: number;
  /** In percent of the axis, at least {@link MIN_WIDTH}. */
  width: number;
};

export type TraceLayout<T> = {
  /** The earliest creation and the latest end (ms since the epoch); 0 when no job has times. */
  start: number;
  end: number;
  span: number;
  /** Oldest first; jobs without a usable creation time come last, at the axis's start. */
  bars: TraceBar<T>[];
};

/** A bar is never thinner than this (percent), so an instant job can still be seen. */
export const MIN_WIDTH = 0.5;

function ms(value: string | null | undefined): number {
  return value ? Date.parse(value) : Number.NaN;
}

/** When a job began and ended: its creation, and its completion or else its last update. */
export function jobSpan(job: TraceJobTimes): { start: number; end: number } {
  const start = ms(job.created_at);
  const candidates = [ms(job.completed_at), ms(job.updated_at), ms(job.started_at)].filter(Number.isFinite);
  const end = Number.isFinite(ms(job.completed_at))
    ? ms(job.completed_at)
    : candidates.length > 0
      ? Math.max(...candidates)
      : start;
  return { start, end: Number.isFinite(start) && end < start ? start : end };
}

export function traceLayout<T extends TraceJobTimes>(jobs: readonly T[]): TraceLayout<T> {
  const spans = jobs.map((job, index) => ({ job, index, ...jobSpan(job) }));
  const timed = spans.filter((s) => Number.isFinite(s.start));
  const start = timed.length > 0 ? Math.min(...timed.map((s) => s.start)) : 0;
  const end = timed.length > 0 ? Math.max(...timed.map((s) => (Number.isFinite(s.end) ? s.end : s.start))) : 0;
  const span = end - start;
  const sorted = [...spans].sort((a, b) => {
    const fa = Number.isFinite(a.start);
    const fb = Number.isFinite(b.start);
    if (fa !== fb) return fa ? -1 : 1;
    if (fa && a.start !== b.start) return a.start - b.start;
    return a.index - b.index;
  });
  const bars = sorted.map(({ job, start: s, end: e }) => {
    if (!Number.isFinite(s)) return { job, start: s, end: e, left: 0, width: MIN_WIDTH };
    const left = span > 0 ? ((s - start) / span) * 100 : 0;
    const raw = span > 0 ? ((e - s) / span) * 100 : 100;
    const width = Math.min(Math.max(raw, MIN_WIDTH), 100);
    // A thin bar at the very end is moved in so it stays inside the axis.
    return { job, start: s, end: e, left: Math.min(left, 100 - width), width };
  });
  return { start, end, span, bars };
}

/** Evenly spaced ticks along the axis: their place (percent) and offset from its start (ms). */
export function axisTicks(span: number, count = 4): { at: number; offset: number }[] {
  if (span <= 0) return [{ at: 0, offset: 0 }];
  return Array.from({ length: count + 1 }, (_, i) => ({ at: (i / count) * 100, offset: (span * i) / count }));
}
