/** Sizes, durations and time offsets as people read them. */

const UNITS = ['KiB', 'MiB', 'GiB', 'TiB'] as const;

/** A byte count: "0 B", "512 B", "1.5 KiB", "4 MiB" (binary units, one decimal below 10). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes) || bytes < 0) return '';
  if (bytes < 1024) return `${Math.round(bytes)} B`;
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit += 1;
  }
  const shown = value < 10 ? Math.round(value * 10) / 10 : Math.round(value);
  return `${shown} ${UNITS[unit]}`;
}

/** A duration in milliseconds: "350 ms", "4.2 s", "3 min 2 s", "1 h 5 min". */
export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
  const value = Math.max(0, ms);
  if (value < 1000) return `${Math.round(value)} ms`;
  const seconds = value / 1000;
  if (seconds < 60) return `${Math.round(seconds * 10) / 10} s`;
  const whole = Math.round(seconds);
  if (whole < 3600) {
    const s = whole % 60;
    return s ? `${Math.floor(whole / 60)} min ${s} s` : `${Math.floor(whole / 60)} min`;
  }
  const minutes = Math.round(whole / 60);
  const m = minutes % 60;
  return m ? `${Math.floor(minutes / 60)} h ${m} min` : `${Math.floor(minutes / 60)} h`;
}

/** An offset from the start of a time axis: "+0 s", "+1.2 s", "+3 min 2 s". */
export function formatOffset(ms: number): string {
  return ms <= 0 ? '+0 s' : `+${formatDuration(ms)}`;
}
