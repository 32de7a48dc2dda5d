import { useEffect, useRef, useState } from 'react';

import { formatTime } from '@/components';

import { formatRemaining, spokenRemaining } from '../countdown';

export type CountdownProps = {
  /** When the approval expires, ms since the epoch. */
  deadline: number;
  /** Told once when the deadline passes. */
  onExpire?: () => void;
};

/**
 * The time left before an approval expires, ticking every second. The ticking text is
 * hidden from screen readers; they get a coarse sentence that changes once a minute.
 */
export function Countdown({ deadline, onExpire }: CountdownProps) {
  const [now, setNow] = useState(() => Date.now());
  const told = useRef(false);
  const left = deadline - now;
  const expired = left <= 0;

  useEffect(() => {
    if (expired) return undefined;
    const timer = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(timer);
  }, [expired]);

  useEffect(() => {
    if (expired && !told.current) {
      told.current = true;
      onExpire?.();
    }
  }, [expired, onExpire]);

  const at = formatTime(new Date(deadline).toISOString());
  return (
    <div className={`countdown${expired ? ' countdown-expired' : ''}`} role="timer" aria-label="Time left to decide">
      <p className="countdown-value" aria-hidden="true">
        {expired ? (
          <>
            <span className="countdown-glyph">✕ </span>Expired
          </>
        ) : (
          <>
            {formatRemaining(left)}
          </>
        )}
      </p>
      <p className="visually-hidden" aria-live="polite">
        {spokenRemaining(left)}
      </p>
      <p className="muted countdown-at">
        {expired ? `Expired at ${at}.` : `Expires at ${at}.`}
      </p>
    </div>
  );
}
