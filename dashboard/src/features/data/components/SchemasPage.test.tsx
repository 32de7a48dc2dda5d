import { screen, waitFor, within } from '@testing-library/react';
import userEvent from '@testing-library/user-event';
import { describe, expect, it } from 'vitest';

import { json, mockFetch, renderPage, type FakeRoute } from '@/testing';

import { meRoute } from '../testMe';
import { SchemasPage } from './SchemasPage';

const ORDER = { id: 'order', schema: { type: 'object', required: ['amount'] }, sha256: 'ab'.repeat(32) };
const USER = { id: 'user', schema: { type: 'object' }, sha256: 'cd'.repeat(32) };

function routes(extra: FakeRoute[] = []): FakeRoute[] {
  return [
    ...extra,
    {
      path: /^\/api\/v1\/schemas\?/,
      respond: ({ url }) =>
        url.searchParams.get('cursor') === 'next'
          ? json({ schemas: [USER], next_cursor: null })
          : json({ schemas: [ORDER], next_cursor: 'next' }),
    },
    {
      path: /^\/api\/v1\/topics\?/,
      body: { items: [{ name: 'job.order', status: 'active', input_schema_id: 'order', pool: 'default' }], next_cursor: null },
    },
  ];
}

function open(list: FakeRoute[]) {
  const fake = mockFetch(list);
  renderPage(<SchemasPage />, { path: '/schemas' });
  return fake;
}

const schemasRegion = () => screen.findByRole('region', { name: 'Registered schemas' });

describe('SchemasPage', () => {
  it('lists schemas with cursor paging and shows a schema as JSON', async () => {
    const { sent } = open(routes([meRoute({ 'schemas.write': true })]));
    const region = await schemasRegion();
    expect(await within(region).findByText('order')).toBeInTheDocument();
    await userEvent.click(within(region).getByRole('button', { name: 'Show schema order' }));
    expect(within(region).getByText(/"required": \[/)).toBeInTheDocument();

    await userEvent.click(within(region).getByRole('button', { name: 'Next page' }));
    expect(await within(region).findByText('user')).toBeInTheDocument();
    const cursors = sent.filter((r) => r.url.pathname === '/api/v1/schemas').map((r) => r.url.searchParams.get('cursor'));
    expect(cursors).toEqual([null, 'next']);
  });

  it("lists the topics with each one's input schema", async () => {
    open(routes([meRoute({ 'schemas.write': true })]));
    const topics = await screen.findByRole('region', { name: 'Topics' });
    const row = (await within(topics).findByText('job.order')).closest('tr') as HTMLElement;
    expect(within(row).getByText('order')).toBeInTheDocument();
    expect(within(row).getByText('active')).toBeInTheDocument();
  });

  it('says clearly why a schema a topic uses cannot be deleted', async () => {
    open(
      routes([
        meRoute({ 'schemas.write': true }),
        {
          method: 'DELETE',
          path: '/api/v1/schemas/order',
          status: 409,
          body: { error: 'schema order is in use by topic(s) job.order: delete or change them first', code: 'SCHEMA_IN_USE', status: 409 },
        },
      ]),
    );
    const region = await schemasRegion();
    const del = await within(region).findByRole('button', { name: 'Delete' });
    await userEvent.click(del);
    await userEvent.click(screen.getByRole('button', { name: 'Yes, delete schema' }));
    expect(await within(region).findByRole('alert')).toHaveTextContent(
      'This schema is still in use: schema order is in use by topic(s) job.order',
    );
  });

  it('deletes a schema after confirming', async () => {
    const { sent } = open(routes([meRoute({ 'schemas.write': true }), { method: 'DELETE', path: '/api/v1/schemas/order', status: 204 }]));
    const region = await schemasRegion();
    await userEvent.click(await within(region).findByRole('button', { name: 'Delete' }));
    await userEvent.click(screen.getByRole('button', { name: 'Yes, delete schema' }));
    await waitFor(() => expect(sent.some((r) => r.method === 'DELETE' && r.url.pathname === '/api/v1/schemas/order')).toBe(true));
  });

  it('registers a schema, refusing text that is not a JSON object', async () => {
    const { sent } = open(routes([meRoute({ 'schemas.write': true }), { method: 'POST', path: '/api/v1/schemas', status: 204 }]));
    const form = await screen.findByRole('form', { name: 'Register a schema' });
    const button = within(form).getByRole('button', { name: 'Register schema' });
    await waitFor(() => expect(button).toBeEnabled());
    await userEvent.type(within(form).getByLabelText('Schema ID'), 'invoice');
    const doc = within(form).getByLabelText('JSON Schema');
    await userEvent.clear(doc);
    await userEvent.type(doc, '[[1]');
    await userEvent.click(button);
    expect(await within(form).findByRole('alert')).toHaveTextContent('The schema must be a JSON object.');
    expect(sent.some((r) => r.method === 'POST')).toBe(false);

    await userEvent.clear(doc);
    await userEvent.type(doc, '{{"type": "string"}');
    await userEvent.click(button);
    expect(await within(form).findByRole('status')).toHaveTextContent('Schema invoice registered.');
    expect(sent.find((r) => r.method === 'POST')?.body).toEqual({ id: 'invoice', schema: { type: 'string' } });
  });

  it('keeps register and delete unavailable, with the reason, for a key that may not', async () => {
    const { sent } = open(routes([meRoute({ 'schemas.write': false }, 'Only admins change schemas.')]));
    const region = await schemasRegion();
    const del = await within(region).findByRole('button', { name: 'Delete' });
    expect(del).toBeDisabled();
    await screen.findAllByText('Only admins change schemas.');
    expect(del).toHaveAccessibleDescription('Only admins change schemas.');
    const register = screen.getByRole('button', { name: 'Register schema' });
    expect(register).toBeDisabled();
    expect(register).toHaveAccessibleDescription('Only admins change schemas.');
    expect(sent.some((r) => r.method !== 'GET')).toBe(false);
  });
});
