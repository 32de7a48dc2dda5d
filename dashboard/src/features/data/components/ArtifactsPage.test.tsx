import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage, type FakeRoute } from '@/testing';

import { meRoute } from '../testMe';
import { ArtifactsPage } from './ArtifactsPage';

const ITEM = {
  artifact_ptr: 'redis://art:a1',
  id: 'a1',
  content_type: 'text/plain',
  size_bytes: 1536,
  retention: 'standard',
  storage: 'redis',
  created_at: '2026-01-01T10:00:00Z',
  expires_at: '2026-01-08T10:00:00Z',
  labels: {},
};
const SECOND = { ...ITEM, artifact_ptr: 'redis://art:a2', id: 'a2', size_bytes: 10 };

function listRoute(): FakeRoute {
  return {
    path: /^\/api\/v1\/artifacts\?/,
    respond: ({ url }) =>
      url.searchParams.get('cursor') === 'c2'
        ? json({ items: [SECOND], next_cursor: null })
        : json({ items: [ITEM], next_cursor: 'c2' }),
  };
}

function open(routes: FakeRoute[]) {
  const fake = mockFetch(routes);
  renderPage(<ArtifactsPage />, { path: '/artifacts' });
  return fake;
}

describe('ArtifactsPage', () => {
  it('lists artifacts with human sizes and pages with the cursor', async () => {
    const { sent } = open([meRoute({ 'artifacts.write': true }), listRoute()]);
    const table = await screen.findByRole('table');
    expect(within(table).getByText('redis://art:a1')).toBeInTheDocument();
    expect(within(table).getByText('1.5 KiB')).toBeInTheDocument();
    expect(within(table).getByText('standard')).toBeInTheDocument();

    await userEvent.click(screen.getByRole('button', { name: 'Next page' }));
    expect(await screen.findByText('redis://art:a2')).toBeInTheDocument();
    expect(screen.getByText('10 B')).toBeInTheDocument();
    const lists = sent.filter((r) => r.url.pathname === '/api/v1/artifacts');
    expect(lists.map((r) => r.url.searchParams.get('cursor'))).toEqual([null, 'c2']);
    expect(lists[0].url.searchParams.get('limit')).toBe('50');

    await userEvent.click(screen.getByRole('button', { name: 'Previous page' }));
    expect(await screen.findByText('redis://art:a1')).toBeInTheDocument();
  });

  it('shows an artifact as escaped text, cut at 64 KiB with a note', async () => {
    const long = '<script>x</script>' + 'a'.repeat(70 * 1024);
    open([
      meRoute({ 'artifacts.write': true }),
      listRoute(),
      {
        path: '/api/v1/artifacts/a1',
        body: {
          artifact_ptr: 'redis://art:a1',
          metadata: { content_type: 'text/plain', size_bytes: long.length, labels: { team: 'x' } },
          content_base64: btoa(long),
        },
      },
    ]);
    await userEvent.click(await screen.findByRole('button', { name: 'Show content of redis://art:a1' }));
    const region = await screen.findByRole('region', { name: 'Artifact content' });
    const pre = await within(region).findByText(/^<script>x<\/script>a+$/);
    expect(pre.textContent).toHaveLength(64 * 1024);
    expect(region.querySelector('script')).toBeNull();
    expect(within(region).getByRole('note')).toHaveTextContent('Only the first 64 KiB of 70 KiB are shown');
  });

  it('stores an artifact when the key may', async () => {
    const { sent } = open([
      meRoute({ 'artifacts.write': true }),
      listRoute(),
      {
        method: 'POST',
        path: '/api/v1/artifacts',
        body: { artifact_ptr: 'redis://art:new', size_bytes: 5, retention: 'short', content_type: 'text/plain' },
      },
      { path: '/api/v1/artifacts/new', body: { artifact_ptr: 'redis://art:new', metadata: {}, content_base64: btoa('hello') } },
    ]);
    const button = await screen.findByRole('button', { name: 'Store artifact' });
    await waitFor(() => expect(button).toBeEnabled());
    await userEvent.type(screen.getByLabelText('Content (text)'), 'hello');
    await userEvent.selectOptions(screen.getByLabelText('Retention'), 'short');
    await userEvent.click(button);
    expect(await screen.findByText(/Stored as/)).toHaveTextContent('redis://art:new');
    const post = sent.find((r) => r.method === 'POST');
    expect(post?.body).toEqual({ content: 'hello', content_type: 'text/plain', retention: 'short' });
  });

  it('keeps the upload unavailable, with the reason, for a key that may not', async () => {
    const { sent } = open([meRoute({ 'artifacts.write': false }, 'Viewers may not store artifacts.'), listRoute()]);
    await screen.findByText('Viewers may not store artifacts.');
    const button = screen.getByRole('button', { name: 'Store artifact' });
    expect(button).toBeDisabled();
    expect(button).toHaveAccessibleDescription('Viewers may not store artifacts.');
    expect(sent.some((r) => r.method === 'POST')).toBe(false);
  });

  it('says when the gateway does not list artifacts', async () => {
    open([meRoute({ 'artifacts.write': true }), { path: /^\/api\/v1\/artifacts\?/, status: 405, body: {} }]);
    expect(await screen.findByText(/does not list artifacts/)).toHaveTextContent('HTTP 405');
  });

  it('shows the empty state', async () => {
    open([meRoute({ 'artifacts.write': true }), { path: /^\/api\/v1\/artifacts\?/, body: { items: [], next_cursor: null } }]);
    expect(await screen.findByText('No artifacts yet')).toBeInTheDocument();
  });
});
