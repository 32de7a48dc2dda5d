/**
 * What the signed-in key may do (GET /api/v1/me): each act's verdict comes from the
 * gateway's own checks, so a page shows an act it would refuse as unavailable, with the
 * reason, instead of sending a request that fails.
 */

import { useQuery } from '@tanstack/react-query';

import { unwrap, useApi, type Schemas } from './api';

export type Act =
  | 'jobs.submit'
  | 'approvals.decide'
  | 'dlq.manage'
  | 'workers.read'
  | 'policy.read'
  | 'policy.simulate'
  | 'policy.change'
  | 'audit.read'
  | 'audit.hold'
  | 'config.read'
  | 'config.write'
  | 'schemas.write'
  | 'artifacts.write'
  | 'locks.write';

export type Verdict = { allowed: boolean; reason: string };

export type Me = Schemas['Me'];

export const CHECKING = 'Checking what the signed-in key may do…';

/** The verdict on `act` in a /me answer; unknown or absent is "not allowed" with why. */
export function verdictOf(me: Me | undefined, act: Act): Verdict {
  if (!me) return { allowed: false, reason: CHECKING };
  const found = me.actions?.[act];
  if (!found) return { allowed: false, reason: `The gateway does not say whether this key may ${act}.` };
  if (found.allowed) return { allowed: true, reason: '' };
  return { allowed: false, reason: found.reason || 'The signed-in key may not do this.' };
}

export function useMe() {
  const api = useApi();
  return useQuery({
    queryKey: ['me'],
    queryFn: () => unwrap(api.GET('/api/v1/me')),
    // A key's role does not change while it is signed in.
    staleTime: 5 * 60_000,
  });
}

/** `can(act)`: whether the signed-in key may take `act`, and why not. */
export function useCapabilities(): { can: (act: Act) => Verdict; me: Me | undefined } {
  const me = useMe().data;
  return { can: (act: Act) => verdictOf(me, act), me };
}
