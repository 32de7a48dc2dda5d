import { useQuery } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from '@/lib/api';
import { usePollInterval } from '@/lib/live';

export type Worker = Schemas['WorkerRuntime'] & { online?: boolean; heartbeat_age_seconds?: number };

export type Pool = {
  name: string;
  workers: Worker[];
  online: number;
  activeJobs: number;
  capacity: number;
};

/** Heartbeats reach the stream for admin keys only: the list is refreshed now and then anyway. */
const REFRESH_WHILE_LIVE_MS = 30_000;

export function useWorkers() {
  const api = useApi();
  const poll = usePollInterval();
  return useQuery({
    queryKey: ['workers'],
    queryFn: async () => ((await unwrap(api.GET('/api/v1/workers'))).items ?? []) as Worker[],
    refetchInterval: poll === false ? REFRESH_WHILE_LIVE_MS : poll,
  });
}

/** Workers grouped by pool (sorted by name), with each pool's load. */
export function byPool(workers: Worker[]): Pool[] {
  const pools = new Map<string, Worker[]>();
  for (const worker of workers) {
    const name = worker.pool || '(no pool)';
    pools.set(name, [...(pools.get(name) ?? []), worker]);
  }
  return [...pools.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, members]) => ({
      name,
      workers: [...members].sort((a, b) => a.worker_id.localeCompare(b.worker_id)),
      online: members.filter((w) => w.online !== false).length,
      activeJobs: members.reduce((n, w) => n + (w.active_jobs ?? 0), 0),
      capacity: members.reduce((n, w) => n + (w.max_parallel_jobs ?? 0), 0),
    }));
}

/** A load figure as CAP's heartbeat sends it (a percentage, 0 to 100). */
export function percent(value: number | undefined): string {
  if (value === undefined || value === null || !Number.isFinite(value)) return '';
  return `${Math.round(value)}%`;
}
