import { useMutation } from '@tanstack/react-query';

import { ApiError, createApiClient, unwrap } from '@/lib/api';
import type { Session } from '@/lib/session';

/** Asks the gateway whether `session`'s key may act for its tenant (GET /api/v1/status). */
export async function checkKey(session: Session): Promise<void> {
  const api = createApiClient({ session });
  await unwrap(api.GET('/api/v1/status'));
}

export function useCheckKey() {
  return useMutation({ mutationFn: checkKey });
}

/** Why a key was refused, in words. */
export function refusal(error: unknown, tenant: string): string {
  if (error instanceof ApiError) {
    if (error.status === 401) return 'The API key was refused. Check it and try again.';
    if (error.status === 403) return `This key may not act for tenant "${tenant}".`;
    if (error.status === 429) return 'Too many attempts. Wait a moment and try again.';
    return `The gateway answered ${error.status}: ${error.message}`;
  }
  return 'The API could not be reached. Check your connection and try again.';
}
