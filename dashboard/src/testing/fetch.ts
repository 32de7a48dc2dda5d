/**
 * A stand-in for the gateway in tests: `globalThis.fetch` answering from a table of
 * routes, recording every request (method, URL, headers, JSON body).
 */

import { vi } from 'vitest';

export type FakeRoute = {
  method?: string;
  /** The path, or a pattern tested against path and query. */
  path: string | RegExp;
  status?: number;
  body?: unknown;
  /** Answers instead of `status`/`body` (e.g. a body that depends on the query). */
  respond?: (request: SentRequest) => Response | Promise<Response>;
};

export type SentRequest = { method: string; url: URL; headers: Headers; body: unknown };

export function json(body: unknown, status = 200): Response {
  if (status === 204) return new Response(null, { status });
  return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
}

export function mockFetch(routes: FakeRoute[]) {
  const sent: SentRequest[] = [];
  const fetchMock = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    const request = input instanceof Request ? input : new Request(new URL(String(input), 'http://localhost'), init);
    const url = new URL(request.url, 'http://localhost');
    const text = request.body ? await request.clone().text() : '';
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    const record = { method: request.method, url, headers: request.headers, body };
    sent.push(record);
    const route = routes.find(
      (r) =>
        (r.method ?? 'GET') === request.method &&
        (typeof r.path === 'string' ? r.path === url.pathname : r.path.test(url.pathname + url.search)),
    );
    if (!route) return json({ error: 'not found', code: 'not_found', status: 404 }, 404);
    if (route.respond) return route.respond(record);
    return json(route.body ?? {}, route.status ?? 200);
  });
  vi.stubGlobal('fetch', fetchMock);
  return { fetchMock, sent };
}
