import { useLiveState, type LiveState } from '@/lib/live';

const TEXT: Record<LiveState, string> = {
  live: 'Live',
  connecting: 'Connecting',
  reconnecting: 'Reconnecting',
  polling: 'Polling',
};

const HINT: Record<LiveState, string> = {
  live: 'Pages update as events happen.',
  connecting: 'Opening the live event stream.',
  reconnecting: 'The live event stream dropped; trying again.',
  polling: 'The live event stream is unavailable; pages refresh every few seconds.',
};

/** The live stream's state, announced politely when it changes. */
export function LiveBadge() {
  const state = useLiveState();
  return (
    <span className={`live-badge live-${state}`} role="status" aria-label="Live updates" title={HINT[state]}>
      <span className="live-dot" aria-hidden="true" />
      {TEXT[state]}
    </span>
  );
}
