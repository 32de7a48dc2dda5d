/** How a status word looks: its tone (colour) and a glyph (shape), so colour is never alone. */

export type Tone = 'success' | 'danger' | 'warning' | 'active' | 'neutral';

const TONES: Record<string, Tone> = {
  succeeded: 'success',
  success: 'success',
  completed: 'success',
  approved: 'success',
  allow: 'success',
  online: 'success',
  connected: 'success',
  healthy: 'success',
  ok: 'success',
  live: 'success',
  closed: 'success', // a closed breaker lets calls through
  failed: 'danger',
  failed_fatal: 'danger',
  error: 'danger',
  denied: 'danger',
  deny: 'danger',
  rejected: 'danger',
  timeout: 'danger',
  timed_out: 'danger',
  output_quarantined: 'danger',
  quarantined: 'danger',
  offline: 'danger',
  disconnected: 'danger',
  unhealthy: 'danger',
  open: 'danger',
  approval_required: 'warning',
  require_approval: 'warning',
  waiting: 'warning',
  pending: 'warning',
  retrying: 'warning',
  throttle: 'warning',
  half_open: 'warning',
  reconnecting: 'warning',
  polling: 'warning',
  allow_with_constraints: 'warning',
  running: 'active',
  dispatched: 'active',
  scheduled: 'active',
  connecting: 'active',
  cancelled: 'neutral',
  canceled: 'neutral',
  skipped: 'neutral',
  unknown: 'neutral',
};

export const TONE_GLYPHS: Record<Tone, string> = {
  success: '✓',
  danger: '✕',
  warning: '!',
  active: '●',
  neutral: '○',
};

export function toneOf(status: string): Tone {
  const word = status.trim().toLowerCase().replace(/[\s-]+/g, '_').replace(/^(job_status|decision_type)_/, '');
  return TONES[word] ?? 'neutral';
}
