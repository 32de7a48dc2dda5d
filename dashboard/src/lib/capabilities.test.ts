import { describe, expect, it } from 'vitest';

import { CHECKING, verdictOf, type Me } from './capabilities';

const me: Me = {
  principal_id: 'p',
  tenant: 'default',
  role: 'viewer',
  actions: {
    'workers.read': { allowed: true },
    'policy.change': { allowed: false, reason: 'Changing the policy takes a key of every tenant.', code: 'x' },
    'audit.hold': { allowed: false },
  },
};

describe('verdictOf', () => {
  it('allows what the gateway allows', () => {
    expect(verdictOf(me, 'workers.read')).toEqual({ allowed: true, reason: '' });
  });

  it('refuses with the gateway’s reason', () => {
    expect(verdictOf(me, 'policy.change')).toEqual({
      allowed: false,
      reason: 'Changing the policy takes a key of every tenant.',
    });
  });

  it('refuses with a reason even when the gateway gave none', () => {
    const verdict = verdictOf(me, 'audit.hold');
    expect(verdict.allowed).toBe(false);
    expect(verdict.reason).not.toBe('');
  });

  it('refuses, saying so, an act the gateway does not name and anything before it answered', () => {
    expect(verdictOf(me, 'locks.write')).toEqual({
      allowed: false,
      reason: 'The gateway does not say whether this key may locks.write.',
    });
    expect(verdictOf(undefined, 'workers.read')).toEqual({ allowed: false, reason: CHECKING });
  });
});
