import { screen, waitFor } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { SESSION_STORAGE_KEY } from '@/lib/session';
import { mockFetch, renderPage } from '@/testing';

import { SignInPage } from './SignInPage';

const STATUS = { time: '2026-01-01T00:00:00Z', nats: { connected: true }, redis: { connected: true }, workers: 1 };

describe('SignInPage', () => {
  it('checks the key with GET /api/v1/status, keeps it, and goes on', async () => {
    const { sent } = mockFetch([{ path: '/api/v1/status', body: STATUS }]);
    renderPage(<SignInPage />, { path: '/sign-in', session: null });
    const user = userEvent.setup();

    const key = screen.getByLabelText('API key');
    expect(key).toHaveAttribute('type', 'password');
    expect(screen.getByLabelText('Tenant')).toHaveValue('default');
    await user.type(key, 'good-key');
    await user.clear(screen.getByLabelText('Tenant'));
    await user.type(screen.getByLabelText('Tenant'), 'acme');
    await user.click(screen.getByRole('button', { name: 'Sign in' }));

    await waitFor(() => expect(screen.getByTestId('location')).toHaveTextContent(/^\/$/));
    expect(sent[0].url.pathname).toBe('/api/v1/status');
    expect(sent[0].headers.get('X-API-Key')).toBe('good-key');
    expect(sent[0].headers.get('X-Tenant-ID')).toBe('acme');
    expect(JSON.parse(window.sessionStorage.getItem(SESSION_STORAGE_KEY) ?? '{}')).toEqual({
      apiKey: 'good-key',
      tenant: 'acme',
    });
    expect(window.localStorage.length).toBe(0);
  });

  it('shows the refusal and keeps nothing when the key is refused', async () => {
    mockFetch([{ path: '/api/v1/status', status: 401, body: { error: 'unauthorized', code: 'unauthorized', status: 401 } }]);
    renderPage(<SignInPage />, { path: '/sign-in', session: null });
    const user = userEvent.setup();

    await user.type(screen.getByLabelText('API key'), 'bad-key');
    await user.click(screen.getByRole('button', { name: 'Sign in' }));

    expect(await screen.findByRole('alert')).toHaveTextContent('The API key was refused');
    expect(window.sessionStorage.getItem(SESSION_STORAGE_KEY)).toBeNull();
    expect(screen.getByTestId('location')).toHaveTextContent('/sign-in');
  });

  it('says when the key may not act for the tenant', async () => {
    mockFetch([{ path: '/api/v1/status', status: 403, body: { error: 'tenant access denied', code: 'tenant_access_denied', status: 403 } }]);
    renderPage(<SignInPage />, { path: '/sign-in', session: null });
    const user = userEvent.setup();

    await user.type(screen.getByLabelText('API key'), 'k');
    await user.click(screen.getByRole('button', { name: 'Sign in' }));

    expect(await screen.findByRole('alert')).toHaveTextContent('may not act for tenant "default"');
  });

  it('asks for a key before sending anything', async () => {
    const { sent } = mockFetch([]);
    renderPage(<SignInPage />, { path: '/sign-in', session: null });
    await userEvent.setup().click(screen.getByRole('button', { name: 'Sign in' }));
    expect(screen.getByRole('alert')).toHaveTextContent('Enter an API key.');
    expect(sent).toHaveLength(0);
  });
});
