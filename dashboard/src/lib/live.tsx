/**
 * Live updates for every page: one stream connection while signed in, which
 * invalidates the cached answers an event makes stale, so lists and details refetch
 * on their own. While the stream is down the pages poll instead ({@link usePollInterval}).
 */

import { useQueryClient } from '@tanstack/react-query';
import {
  createContext,
  useCallback,
  useContext,
  useEffect,
  useMemo,
  useRef,
  useState,
  type ReactNode,
} from 'react';

import { InvalidationThrottle, keysForEvent } from './invalidation';
import { LiveConnection, type LiveConnectionOptions, type LiveEvent, type LiveState } from './liveConnection';
import { useSession } from './session';

export type { LiveEvent, LiveState } from './liveConnection';

/** The window over which {@link useEventRate} counts, in ms. */
export const EVENT_RATE_WINDOW_MS = 10_000;

type Listener = (event: LiveEvent) => void;

type LiveContextValue = {
  state: LiveState;
  subscribe(listener: Listener): () => void;
  /** Arrival times (ms) of the events of the last {@link EVENT_RATE_WINDOW_MS}. */
  eventTimes: { current: number[] };
};

// Outside a LiveProvider nothing is live: pages poll.
const LiveContext = createContext<LiveContextValue>({
  state: 'polling',
  subscribe: () => () => {},
  eventTimes: { current: [] },
});

export type LiveProviderProps = {
  children: ReactNode;
  /** Overrides of the connection's settings (tests pass a fetch and a quick sleep). */
  connection?: Partial<Pick<LiveConnectionOptions, 'policy' | 'sleep' | 'fetch' | 'maxEventChars'>>;
  /** The throttle window of invalidations per query key, in ms. */
  throttleMs?: number;
};

function pruneOld(times: number[], now: number): void {
  const from = now - EVENT_RATE_WINDOW_MS;
  let drop = 0;
  while (drop < times.length && times[drop] <= from) drop++;
  if (drop) times.splice(0, drop);
}

export function LiveProvider({ children, connection, throttleMs = 500 }: LiveProviderProps) {
  const { session } = useSession();
  const queryClient = useQueryClient();
  const [state, setState] = useState<LiveState>('connecting');
  const listeners = useRef(new Set<Listener>());
  const eventTimes = useRef<number[]>([]);
  const options = useRef(connection);

  const apiKey = session?.apiKey ?? '';
  const tenant = session?.tenant ?? '';

  useEffect(() => {
    if (!apiKey) return undefined;
    const throttle = new InvalidationThrottle(
      (queryKey) => void queryClient.invalidateQueries({ queryKey }),
      throttleMs,
    );
    const live = new LiveConnection({
      ...options.current,
      apiKey,
      tenant,
      onState: setState,
      onEvent: (event) => {
        const now = Date.now();
        eventTimes.current.push(now);
        pruneOld(eventTimes.current, now);
        if (event.type === 'stream.truncated') {
          // Events were skipped: no cached answer can be trusted.
          void queryClient.invalidateQueries();
        } else {
          for (const key of keysForEvent(event)) throttle.request(key);
        }
        for (const listener of listeners.current) listener(event);
      },
    });
    return () => {
      live.close();
      throttle.dispose();
    };
  }, [apiKey, tenant, queryClient, throttleMs]);

  const subscribe = useCallback((listener: Listener) => {
    listeners.current.add(listener);
    return () => {
      listeners.current.delete(listener);
    };
  }, []);

  const value = useMemo<LiveContextValue>(
    () => ({ state: apiKey ? state : 'polling', subscribe, eventTimes }),
    [state, apiKey, subscribe],
  );
  return <LiveContext.Provider value={value}>{children}</LiveContext.Provider>;
}

export function useLiveState(): LiveState {
  return useContext(LiveContext).state;
}

/** Calls `onEvent` for every live event while the calling component is mounted. */
export function useLiveEvents(onEvent: (e: LiveEvent) => void): void {
  const { subscribe } = useContext(LiveContext);
  const latest = useRef(onEvent);
  useEffect(() => {
    latest.current = onEvent;
  });
  useEffect(() => subscribe((event) => latest.current(event)), [subscribe]);
}

/** A refetch interval for TanStack Query: false while the stream is live, else `ms`. */
export function usePollInterval(ms = 5000): number | false {
  return useLiveState() === 'live' ? false : ms;
}

/** Live events per second over the last 10 s, updated every second. */
export function useEventRate(): number {
  const { eventTimes } = useContext(LiveContext);
  const [rate, setRate] = useState(0);
  useEffect(() => {
    const tick = () => {
      const now = Date.now();
      pruneOld(eventTimes.current, now);
      setRate(eventTimes.current.length / (EVENT_RATE_WINDOW_MS / 1000));
    };
    tick();
    const timer = setInterval(tick, 1000);
    return () => clearInterval(timer);
  }, [eventTimes]);
  return rate;
}
