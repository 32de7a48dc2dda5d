/** Gateway answers the policy pages' tests share. */

import type { FakeRoute } from '@/testing';

export const ALLOW = { allowed: true };

export function me(overrides: Record<string, { allowed: boolean; reason?: string; code?: string }> = {}, principal = 'alice') {
  return {
    principal_id: principal,
    tenant: 'default',
    role: 'admin',
    actions: { 'policy.read': ALLOW, 'policy.simulate': ALLOW, 'policy.change': ALLOW, ...overrides },
  };
}

export const NO_CHANGE_REASON =
  'the policy governs every tenant: changing it takes a key whose tenant is * (policy_write_requires_any_tenant_key)';

export const READ_ONLY = me({
  'policy.change': { allowed: false, reason: NO_CHANGE_REASON, code: 'policy_write_requires_any_tenant_key' },
});

export const SHA = 'a'.repeat(64);

export function meRoute(body: unknown = me()): FakeRoute {
  return { path: '/api/v1/me', body };
}

/** Whether any request but a read was sent. */
export function wrote(sent: { method: string }[]): boolean {
  return sent.some((r) => r.method !== 'GET');
}
