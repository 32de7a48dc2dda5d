/**
 * Small SVG charts. Each is an image with a summary for screen readers, and every value
 * is written beside its bar, so nothing is told by colour alone; the section around a
 * chart carries its numbers as a table too.
 */

import { useId, type ReactNode } from 'react';

export type Bar = {
  /** Unique within the chart. */
  key: string;
  /** The row's name; empty for the second bar of a group. */
  label: string;
  value: number;
  /** What is written at the end of the bar (the value when absent). */
  text?: string;
  /** The series of a grouped chart: drawn with another fill and named in `text`. */
  series?: 'first' | 'second';
};

const WIDTH = 720;
const LABEL_W = 220;
const TEXT_W = 150;
const ROW_H = 26;
const BAR_H = 16;

function clip(text: string, max: number): string {
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Horizontal bars, one row each, scaled to `max` (the largest value when absent). */
export function HBarChart({ bars, summary, max }: { bars: Bar[]; summary: string; max?: number }) {
  const top = Math.max(max ?? 0, ...bars.map((b) => b.value), 0);
  const room = WIDTH - LABEL_W - TEXT_W;
  const height = Math.max(bars.length, 1) * ROW_H + 8;
  return (
    <svg
      className="govern-chart"
      role="img"
      aria-label={summary}
      viewBox={`0 0 ${WIDTH} ${height}`}
      width="100%"
      preserveAspectRatio="xMinYMin meet"
    >
      {bars.map((bar, i) => {
        const y = 4 + i * ROW_H;
        const w = top > 0 ? Math.max((bar.value / top) * room, bar.value > 0 ? 2 : 0) : 0;
        return (
          <g key={bar.key}>
            {bar.label && (
              <text x={LABEL_W - 8} y={y + BAR_H - 3} textAnchor="end" className="govern-chart-label">
                {clip(bar.label, 30)}
              </text>
            )}
            <rect
              x={LABEL_W}
              y={y}
              width={w}
              height={BAR_H}
              className={bar.series === 'second' ? 'govern-bar govern-bar-second' : 'govern-bar'}
            />
            <text x={LABEL_W + w + 6} y={y + BAR_H - 3} className="govern-chart-value">
              {bar.text ?? String(bar.value)}
            </text>
          </g>
        );
      })}
      <line x1={LABEL_W} x2={LABEL_W} y1={0} y2={height} className="govern-axis" />
    </svg>
  );
}

export type Column = { key: string; label: string; value: number };

/** Vertical columns side by side (a histogram), each with its count above it. */
export function ColumnChart({ columns, summary }: { columns: Column[]; summary: string }) {
  const top = Math.max(...columns.map((c) => c.value), 0);
  const height = 200;
  const base = height - 28;
  const room = base - 24;
  const slot = columns.length > 0 ? (WIDTH - 20) / columns.length : WIDTH;
  const barW = Math.min(64, slot * 0.7);
  return (
    <svg
      className="govern-chart"
      role="img"
      aria-label={summary}
      viewBox={`0 0 ${WIDTH} ${height}`}
      width="100%"
      preserveAspectRatio="xMinYMin meet"
    >
      {columns.map((column, i) => {
        const h = top > 0 ? Math.max((column.value / top) * room, column.value > 0 ? 2 : 0) : 0;
        const cx = 10 + slot * i + slot / 2;
        return (
          <g key={column.key}>
            <rect x={cx - barW / 2} y={base - h} width={barW} height={h} className="govern-bar" />
            <text x={cx} y={base - h - 6} textAnchor="middle" className="govern-chart-value">
              {column.value}
            </text>
            <text x={cx} y={base + 18} textAnchor="middle" className="govern-chart-label">
              {column.label}
            </text>
          </g>
        );
      })}
      <line x1={0} x2={WIDTH} y1={base} y2={base} className="govern-axis" />
    </svg>
  );
}

/** A chart's section: its heading, what it shows, the chart, and its numbers as a table. */
export function ChartSection({
  title,
  description,
  chart,
  table,
}: {
  title: string;
  description?: ReactNode;
  chart: ReactNode;
  table: ReactNode;
}) {
  const heading = useId();
  return (
    <section className="govern-chart-section card" aria-labelledby={heading}>
      <h2 id={heading}>{title}</h2>
      {description && <p className="govern-muted">{description}</p>}
      {chart}
      <details className="govern-numbers">
        <summary>Show the numbers</summary>
        {table}
      </details>
    </section>
  );
}
