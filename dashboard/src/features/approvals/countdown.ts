/** The words of the time left to decide an approval. */

const pad = (n: number) => String(n).padStart(2, '0');

/** What the visible countdown reads: "1 d 02 h 05 min", "1 h 04 min 05 s", "4 min 05 s", "9 s". */
export function formatRemaining(ms: number): string {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const days = Math.floor(total / 86_400);
  const hours = Math.floor((total % 86_400) / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = total % 60;
  if (days > 0) return `${days} d ${pad(hours)} h ${pad(minutes)} min`;
  if (hours > 0) return `${hours} h ${pad(minutes)} min ${pad(seconds)} s`;
  if (minutes > 0) return `${minutes} min ${pad(seconds)} s`;
  return `${seconds} s`;
}

/**
 * What a screen reader is told: whole minutes (hours past two hours), so the announcement
 * changes at most once a minute instead of every second.
 */
export function spokenRemaining(ms: number): string {
  if (ms <= 0) return 'The approval has expired.';
  const minutes = Math.floor(ms / 60_000);
  if (minutes < 1) return 'Less than a minute left to decide.';
  if (minutes < 120) return `About ${minutes} minute${minutes === 1 ? '' : 's'} left to decide.`;
  const hours = Math.floor(minutes / 60);
  return `About ${hours} hours left to decide.`;
}

/** µs since the epoch (as the context gives decision times) as RFC 3339, '' when absent. */
export function microsToIso(us: number | null | undefined): string {
  if (us === null || us === undefined || !Number.isFinite(us) || us <= 0) return '';
  return new Date(Math.floor(us / 1000)).toISOString();
}
