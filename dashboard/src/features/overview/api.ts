import { useQuery } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

export type Breaker = {
  state?: string;
  failures?: number;
  fail_threshold?: number;
  cooldown_remaining_ms?: number;
};

/** GET /api/v1/status with the admin extras this page reads. */
export type Status = Schemas['StatusResponse'] & {
  circuit_breakers?: Record<string, Breaker>;
  input_fail_open_total?: number;
};

/** How many of the newest jobs the state counts are taken from. */
export const SAMPLE_SIZE = 200;

/** Health has no live event: it is asked for on this beat whatever the stream does. */
const STATUS_INTERVAL_MS = 15_000;

export function useStatus() {
  const api = useApi();
  return useQuery({
    queryKey: ['status'],
    queryFn: async () => (await unwrap(api.GET('/api/v1/status'))) as Status,
    refetchInterval: STATUS_INTERVAL_MS,
  });
}

/** The newest jobs' states, counted (the gateway keeps no totals per state). */
export function useJobStates() {
  const api = useApi();
  const poll = usePollInterval(10_000);
  return useQuery({
    queryKey: ['overview', 'job-states'],
    queryFn: async () => {
      const page = await unwrap(api.GET('/api/v1/jobs', { params: { query: { limit: SAMPLE_SIZE } } }));
      const items = page.items ?? [];
      return { counts: countStates(items.map((j) => j.state ?? '')), sampled: items.length, more: Boolean(page.next_cursor) };
    },
    refetchInterval: poll,
  });
}

export function countStates(states: string[]): [string, number][] {
  const counts = new Map<string, number>();
  for (const state of states) counts.set(state || 'UNKNOWN', (counts.get(state || 'UNKNOWN') ?? 0) + 1);
  return [...counts.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
}
