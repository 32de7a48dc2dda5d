import { describe, expect, it, vi } from 'vitest';

import { FakeEventStream } from '@/testing';

import { LiveConnection, reconnectDelay, STREAM_PATH, type LiveEvent, type LiveState } from './liveConnection';

/** Lets the connection loop run until it waits on something. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

type Call = { url: string; headers: Record<string, string> };

function harness(answers: (() => Response | Promise<Response>)[]) {
  const calls: Call[] = [];
  const states: LiveState[] = [];
  const events: LiveEvent[] = [];
  const sleeps: number[] = [];
  let wake: (() => void) | null = null;
  const fetch = vi.fn(async (url: RequestInfo | URL, init?: RequestInit) => {
    calls.push({ url: String(url), headers: { ...(init?.headers as Record<string, string>) } });
    const next = answers.shift();
    if (!next) return new Promise<Response>(() => {}); // hangs: the test is over
    return next();
  });
  const live = new LiveConnection({
    apiKey: 'k-secret',
    tenant: 'acme',
    onState: (s) => states.push(s),
    onEvent: (e) => events.push(e),
    fetch: fetch as unknown as typeof globalThis.fetch,
    sleep: (ms, signal) => {
      sleeps.push(ms);
      return new Promise<void>((resolve) => {
        wake = resolve;
        signal.addEventListener('abort', () => resolve());
      });
    },
  });
  /** Ends the current backoff wait. */
  const advance = async () => {
    await settle();
    const w = wake;
    wake = null;
    w?.();
    await settle();
  };
  return { live, calls, states, events, sleeps, advance };
}

describe('reconnectDelay', () => {
  it('doubles from 1 s up to 30 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 10].map((n) => reconnectDelay(n))).toEqual([
      1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000,
    ]);
  });
});

describe('LiveConnection', () => {
  it('sends the key and tenant as headers, never in the URL, and goes live', async () => {
    const stream = new FakeEventStream();
    const h = harness([() => stream.response]);
    await settle();

    expect(h.calls[0].url).toBe(STREAM_PATH);
    expect(h.calls[0].url).not.toContain('k-secret');
    expect(h.calls[0].headers).toMatchObject({
      Accept: 'text/event-stream',
      'X-API-Key': 'k-secret',
      'X-Tenant-ID': 'acme',
    });
    expect(h.calls[0].headers['Last-Event-ID']).toBeUndefined();
    expect(h.states).toEqual(['connecting', 'live']);

    stream.event('job.submit', { jobRequest: { jobId: 'j1' } }, '1-0');
    await settle();
    expect(h.events).toEqual([{ id: '1-0', type: 'job.submit', data: { jobRequest: { jobId: 'j1' } } }]);
    h.live.close();
  });

  it('reconnects after a drop with Last-Event-ID and a 1 s wait', async () => {
    const first = new FakeEventStream();
    const second = new FakeEventStream();
    const h = harness([() => first.response, () => second.response]);
    await settle();
    first.event('job.result', { jobResult: { jobId: 'j1' } }, '5-0');
    await settle();
    first.fail();
    await settle();

    expect(h.states).toEqual(['connecting', 'live', 'reconnecting']);
    expect(h.sleeps).toEqual([1000]);
    await h.advance();

    expect(h.calls[1].headers['Last-Event-ID']).toBe('5-0');
    expect(h.states).toEqual(['connecting', 'live', 'reconnecting', 'live']);
    h.live.close();
  });

  it('polls after 3 failed attempts in a row and keeps trying with backoff', async () => {
    const fail = () => new Response('{"error":"down"}', { status: 503 });
    const stream = new FakeEventStream();
    const h = harness([fail, fail, fail, fail, () => stream.response]);
    await settle();
    expect(h.states).toEqual(['connecting', 'reconnecting']);
    await h.advance();
    expect(h.states).toEqual(['connecting', 'reconnecting']);
    await h.advance();
    expect(h.states).toEqual(['connecting', 'reconnecting', 'polling']);
    await h.advance();
    expect(h.sleeps).toEqual([1000, 2000, 4000, 8000]);
    await h.advance();
    expect(h.calls).toHaveLength(5);
    expect(h.states).toEqual(['connecting', 'reconnecting', 'polling', 'live']);
    h.live.close();
  });

  it('counts a network error and a non-SSE answer as failures', async () => {
    const h = harness([
      () => Promise.reject(new TypeError('Failed to fetch')),
      () => new Response('<html>', { status: 200, headers: { 'Content-Type': 'text/html' } }),
      () => new Response(null, { status: 401 }),
    ]);
    await settle();
    await h.advance();
    await h.advance();
    expect(h.states).toEqual(['connecting', 'reconnecting', 'polling']);
    h.live.close();
  });

  it('stops for good when closed', async () => {
    const stream = new FakeEventStream();
    const h = harness([() => stream.response]);
    await settle();
    h.live.close();
    await h.live.done;
    expect(h.calls).toHaveLength(1);
    expect(h.states).toEqual(['connecting', 'live']);
  });

  it('stops during a backoff wait when closed', async () => {
    const h = harness([() => new Response(null, { status: 503 })]);
    await settle();
    expect(h.sleeps).toEqual([1000]);
    h.live.close();
    await h.live.done;
    expect(h.calls).toHaveLength(1);
  });

  it('passes data that is not JSON through as text', async () => {
    const stream = new FakeEventStream();
    const h = harness([() => stream.response]);
    await settle();
    stream.write('event: system.alert\ndata: plain words\n\n');
    await settle();
    expect(h.events).toEqual([{ id: '', type: 'system.alert', data: 'plain words' }]);
    h.live.close();
  });
});
