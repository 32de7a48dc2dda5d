import { describe, expect, it } from 'vitest';

import { axisTicks, jobSpan, MIN_WIDTH, traceLayout } from './traceLayout';

const T0 = Date.parse('2026-01-01T10:00:00Z');
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

describe('jobSpan', () => {
  it('runs from creation to completion, else to the last update', () => {
    expect(jobSpan({ created_at: at(0), updated_at: at(9), completed_at: at(5) })).toEqual({
      start: T0,
      end: T0 + 5000,
    });
    expect(jobSpan({ created_at: at(2), updated_at: at(4) })).toEqual({ start: T0 + 2000, end: T0 + 4000 });
    expect(jobSpan({ created_at: at(2) })).toEqual({ start: T0 + 2000, end: T0 + 2000 });
    // An end before the start (clock skew) is clamped to the start.
    expect(jobSpan({ created_at: at(3), updated_at: at(1) })).toEqual({ start: T0 + 3000, end: T0 + 3000 });
  });
});

describe('traceLayout', () => {
  it('places every job on one axis from the first creation to the last end, oldest first', () => {
    const jobs = [
      { id: 'late', created_at: at(5), updated_at: at(10) },
      { id: 'first', created_at: at(0), completed_at: at(2), updated_at: at(2) },
      { id: 'middle', created_at: at(2.5), updated_at: at(7.5) },
    ];
    const layout = traceLayout(jobs);
    expect(layout.start).toBe(T0);
    expect(layout.end).toBe(T0 + 10_000);
    expect(layout.span).toBe(10_000);
    expect(layout.bars.map((b) => b.job.id)).toEqual(['first', 'middle', 'late']);
    expect(layout.bars.map((b) => [b.left, b.width])).toEqual([
      [0, 20],
      [25, 50],
      [50, 50],
    ]);
  });

  it('gives an instant job a visible width, kept inside the axis', () => {
    const layout = traceLayout([
      { id: 'a', created_at: at(0), updated_at: at(10) },
      { id: 'b', created_at: at(10), updated_at: at(10) },
    ]);
    const b = layout.bars[1];
    expect(b.width).toBe(MIN_WIDTH);
    expect(b.left + b.width).toBeLessThanOrEqual(100);
  });

  it('fills the axis for a single instant, and puts untimed jobs last', () => {
    const layout = traceLayout([{ id: 'x' }, { id: 'y', created_at: at(1), updated_at: at(1) }]);
    expect(layout.bars.map((b) => b.job.id)).toEqual(['y', 'x']);
    expect(layout.bars[0]).toMatchObject({ left: 0, width: 100 });
    expect(layout.bars[1]).toMatchObject({ left: 0, width: MIN_WIDTH });
  });

  it('is empty for no jobs', () => {
    expect(traceLayout([])).toEqual({ start: 0, end: 0, span: 0, bars: [] });
  });
});

describe('axisTicks', () => {
  it('spaces ticks evenly with their offsets', () => {
    expect(axisTicks(8000)).toEqual([
      { at: 0, offset: 0 },
      { at: 25, offset: 2000 },
      { at: 50, offset: 4000 },
      { at: 75, offset: 6000 },
      { at: 100, offset: 8000 },
    ]);
    expect(axisTicks(0)).toEqual([{ at: 0, offset: 0 }]);
  });
});
