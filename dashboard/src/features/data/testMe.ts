/** Test helper: the /api/v1/me answer of a key allowed (or refused) some acts. */

import type { FakeRoute } from '@/testing';

export function meRoute(acts: Record<string, boolean>, reason = 'Your role (viewer) may not do this.'): FakeRoute {
  const actions = Object.fromEntries(
    Object.entries(acts).map(([act, allowed]) => [act, allowed ? { allowed: true } : { allowed: false, reason, code: 'forbidden' }]),
  );
  return {
    path: '/api/v1/me',
    body: { principal_id: 'p-1', tenant: 'default', role: 'admin', actions },
  };
}
