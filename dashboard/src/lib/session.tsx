/**
 * Who is signed in: an API key and the tenant it acts for.
 *
 * Kept in sessionStorage only: it lives as long as the tab, is never written to
 * localStorage and never put in a URL. Signing out forgets it and every cached answer.
 */

import { useQueryClient } from '@tanstack/react-query';
import { createContext, useCallback, useContext, useMemo, useState, type ReactNode } from 'react';

export type Session = { apiKey: string; tenant: string };

export type SessionState = {
  session: Session | null;
  signIn(session: Session): void;
  signOut(): void;
};

export const SESSION_STORAGE_KEY = 'cordum.dashboard.session';

export function readStoredSession(storage: Storage = window.sessionStorage): Session | null {
  let raw: string | null;
  try {
    raw = storage.getItem(SESSION_STORAGE_KEY);
  } catch {
    return null; // storage refused (privacy mode): nobody is signed in
  }
  if (!raw) return null;
  try {
    const value: unknown = JSON.parse(raw);
    if (
      typeof value === 'object' && value !== null &&
      typeof (value as Session).apiKey === 'string' && (value as Session).apiKey &&
      typeof (value as Session).tenant === 'string'
    ) {
      return { apiKey: (value as Session).apiKey, tenant: (value as Session).tenant };
    }
  } catch {
    // a damaged entry is the same as none
  }
  storage.removeItem(SESSION_STORAGE_KEY);
  return null;
}

const noop = () => {};

const SessionContext = createContext<SessionState>({ session: null, signIn: noop, signOut: noop });

export function SessionProvider({ children }: { children: ReactNode }) {
  const queryClient = useQueryClient();
  const [session, setSession] = useState<Session | null>(() => readStoredSession());

  const signIn = useCallback((next: Session) => {
    const clean = { apiKey: next.apiKey, tenant: next.tenant };
    window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify(clean));
    setSession(clean);
  }, []);

  const signOut = useCallback(() => {
    window.sessionStorage.removeItem(SESSION_STORAGE_KEY);
    setSession(null);
    // Another key may see other things: nothing read with this one is kept.
    queryClient.clear();
  }, [queryClient]);

  const value = useMemo(() => ({ session, signIn, signOut }), [session, signIn, signOut]);
  return <SessionContext.Provider value={value}>{children}</SessionContext.Provider>;
}

export function useSession(): SessionState {
  return useContext(SessionContext);
}
