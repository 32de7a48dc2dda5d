import { useId, useState, type FormEvent } from 'react';
import { Navigate, useLocation, useNavigate } from 'react-router';

import { Page, PRODUCT_NAME } from '@/components';
import { useSession } from '@/lib/session';

import { refusal, useCheckKey } from '../api';

function returnPath(state: unknown): string {
  const from = (state as { from?: unknown } | null)?.from;
  return typeof from === 'string' && from.startsWith('/') && !from.startsWith('//') && from !== '/sign-in'
    ? from
    : '/';
}

/** The key and tenant to act with, checked against the gateway before they are kept. */
export function SignInPage() {
  const { session, signIn } = useSession();
  const location = useLocation();
  const navigate = useNavigate();
  const check = useCheckKey();
  const [apiKey, setApiKey] = useState('');
  const [tenant, setTenant] = useState('default');
  const [missing, setMissing] = useState(false);
  const keyId = useId();
  const tenantId = useId();
  const errorId = useId();

  if (session && !check.isPending) return <Navigate to={returnPath(location.state)} replace />;

  function submit(event: FormEvent<HTMLFormElement>) {
    event.preventDefault();
    const next = { apiKey: apiKey.trim(), tenant: tenant.trim() || 'default' };
    if (!next.apiKey) {
      setMissing(true);
      return;
    }
    setMissing(false);
    check.mutate(next, {
      onSuccess: () => {
        signIn(next);
        void navigate(returnPath(location.state), { replace: true });
      },
    });
  }

  const message = missing ? 'Enter an API key.' : check.isError ? refusal(check.error, tenant.trim() || 'default') : '';
  return (
    <main id="main" className="sign-in">
      <Page title={`Sign in to ${PRODUCT_NAME}`}>
        <form className="sign-in-form" onSubmit={submit} noValidate>
          <p className="muted">
            Use an API key of the gateway. It is kept in this browser tab only, and forgotten when you sign
            out or close the tab.
          </p>
          <div className="field">
            <label htmlFor={keyId}>API key</label>
            <input
              id={keyId}
              type="password"
              autoComplete="off"
              spellCheck={false}
              value={apiKey}
              onChange={(e) => setApiKey(e.target.value)}
              aria-invalid={message ? true : undefined}
              aria-describedby={message ? errorId : undefined}
              required
            />
          </div>
          <div className="field">
            <label htmlFor={tenantId}>Tenant</label>
            <input
              id={tenantId}
              type="text"
              autoComplete="off"
              spellCheck={false}
              value={tenant}
              onChange={(e) => setTenant(e.target.value)}
            />
          </div>
          {message && (
            <p id={errorId} className="form-error" role="alert">
              {message}
            </p>
          )}
          <div className="form-actions">
            <button type="submit" className="button-primary" disabled={check.isPending}>
              Sign in
            </button>
            <span role="status" className="muted">
              {check.isPending ? 'Checking the key…' : ''}
            </span>
          </div>
        </form>
      </Page>
    </main>
  );
}
