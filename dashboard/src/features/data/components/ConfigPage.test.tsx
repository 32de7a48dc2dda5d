import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage, type FakeRoute } from '@/testing';

import { meRoute } from '../testMe';
import { ConfigPage, effectiveIdsFor, parseConfigData } from './ConfigPage';

const DOC = {
  scope: 'team',
  scope_id: 'red',
  data: { safety: { denied_topics: ['job.bad'] } },
  revision: 3,
  updated_at: '2026-01-01T10:00:00Z',
  meta: {},
};

function configRoutes(extra: FakeRoute[] = []): FakeRoute[] {
  return [
    ...extra,
    {
      path: /^\/api\/v1\/config\?/,
      respond: ({ url }) =>
        url.searchParams.get('scope') === 'team' && url.searchParams.get('scope_id') === 'red'
          ? json(DOC)
          : json({ error: 'config not found', code: 'config_not_found', status: 404 }, 404),
    },
    {
      path: /^\/api\/v1\/config\/effective/,
      respond: ({ url }) =>
        json(
          url.searchParams.get('team_id') === 'red'
            ? { version: 'system:0|org:0|team:3|workflow:0|step:0', hash: 'h-red', data: DOC.data }
            : { version: 'system:0|org:0|team:0|workflow:0|step:0', hash: 'h-none', data: {} },
        ),
    },
  ];
}

function open(routes: FakeRoute[]) {
  const fake = mockFetch(routes);
  renderPage(<ConfigPage />, { path: '/config' });
  return fake;
}

async function load(scope: string, id: string) {
  await userEvent.selectOptions(await screen.findByLabelText('Scope'), scope);
  const input = screen.getByLabelText('Scope ID');
  await userEvent.clear(input);
  if (id) await userEvent.type(input, id);
  await userEvent.click(screen.getByRole('button', { name: 'Load document' }));
}

describe('ConfigPage', () => {
  it('shows a scope’s document with its revision and the effective config beside it', async () => {
    const { sent } = open(configRoutes([meRoute({ 'config.read': true, 'config.write': true })]));
    const effective = await screen.findByRole('region', { name: 'Effective config' });
    expect(await within(effective).findByText('h-none')).toBeInTheDocument();

    await load('team', 'red');
    const doc = await screen.findByRole('region', { name: /^Document: team red/ });
    expect(await within(doc).findByText('3')).toBeInTheDocument();
    expect(within(doc).getAllByText(/"denied_topics"/).length).toBeGreaterThan(0);
    expect(await within(effective).findByText('h-red')).toBeInTheDocument();
    expect(within(effective).getByText('system:0|org:0|team:3|workflow:0|step:0')).toBeInTheDocument();
    const read = sent.find((r) => r.url.pathname === '/api/v1/config' && r.url.searchParams.get('scope') === 'team');
    expect(read?.url.searchParams.get('envelope')).toBe('true');
    expect(read?.url.searchParams.get('scope_id')).toBe('red');
  });

  it('saves with the revision it read', async () => {
    const { sent } = open(
      configRoutes([meRoute({ 'config.read': true, 'config.write': true }), { method: 'PUT', path: '/api/v1/config', status: 204 }]),
    );
    await load('team', 'red');
    const editor = await screen.findByLabelText('Data (JSON)');
    await waitFor(() => expect(editor).toHaveValue(JSON.stringify(DOC.data, null, 2)));
    await userEvent.clear(editor);
    await userEvent.type(editor, '{{"limit": 5}');
    await userEvent.click(screen.getByRole('button', { name: 'Save document' }));
    expect(await screen.findByText('Saved.')).toBeInTheDocument();
    expect(sent.find((r) => r.method === 'PUT')?.body).toEqual({
      scope: 'team',
      scope_id: 'red',
      data: { limit: 5 },
      revision: 3,
    });
  });

  it('explains a lost race (409) clearly', async () => {
    open(
      configRoutes([
        meRoute({ 'config.read': true, 'config.write': true }),
        {
          method: 'PUT',
          path: '/api/v1/config',
          status: 409,
          body: { error: 'config revision conflict', code: 'config_version_conflict', status: 409 },
        },
      ]),
    );
    await load('team', 'red');
    const save = await screen.findByRole('button', { name: 'Save document' });
    await userEvent.click(save);
    expect(await screen.findByRole('alert')).toHaveTextContent(
      'Someone else changed this document after you loaded it, so it was not saved.',
    );
  });

  it('offers to create a document that does not exist yet, at revision 0', async () => {
    const { sent } = open(
      configRoutes([meRoute({ 'config.read': true, 'config.write': true }), { method: 'PUT', path: '/api/v1/config', status: 204 }]),
    );
    await load('workflow', 'wf-1');
    expect(await screen.findByText('No document at this scope yet')).toBeInTheDocument();
    await userEvent.click(screen.getByRole('button', { name: 'Save document' }));
    await waitFor(() => expect(sent.find((r) => r.method === 'PUT')?.body).toMatchObject({ revision: 0, scope: 'workflow' }));
  });

  it('keeps the editor unavailable, with the reason, for a reader', async () => {
    const { sent } = open(configRoutes([meRoute({ 'config.read': true, 'config.write': false }, 'Operators may read config only.')]));
    await load('team', 'red');
    const save = await screen.findByRole('button', { name: 'Save document' });
    expect(save).toBeDisabled();
    expect(save).toHaveAccessibleDescription('Operators may read config only.');
    expect(sent.some((r) => r.method === 'PUT')).toBe(false);
  });

  it('says why config cannot be read, and reads nothing', async () => {
    const { sent } = open(configRoutes([meRoute({ 'config.read': false, 'config.write': false }, 'Viewers may not read config.')]));
    expect(await screen.findByText('Viewers may not read config.')).toBeInTheDocument();
    expect(screen.getByText('Config is not available to this key')).toBeInTheDocument();
    expect(sent.some((r) => r.url.pathname.startsWith('/api/v1/config'))).toBe(false);
    expect(screen.queryByRole('button', { name: 'Load document' })).not.toBeInTheDocument();
  });
});

describe('config helpers', () => {
  it('parses the editor text as an object of members', () => {
    expect(parseConfigData('{"a": 1}')).toEqual({ data: { a: 1 } });
    expect(parseConfigData('[]').error).toMatch(/JSON object/);
    expect(parseConfigData('{').error).toMatch(/not valid JSON/);
  });

  it('asks the effective config for the loaded scope', () => {
    expect(effectiveIdsFor({ scope: 'team', id: 't' })).toEqual({ team_id: 't', workflow_id: '', step_id: '' });
    expect(effectiveIdsFor({ scope: 'step', id: 's' })).toEqual({ team_id: '', workflow_id: '', step_id: 's' });
    expect(effectiveIdsFor({ scope: 'org', id: '' })).toEqual({ team_id: '', workflow_id: '', step_id: '' });
  });
});
