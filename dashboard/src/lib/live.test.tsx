import { QueryClientProvider } from '@tanstack/react-query';
import { act, render, screen } from '@testing-library/react';
import { useState } from 'react';
import { afterEach, describe, expect, it, vi } from 'vitest';

import { FakeEventStream, testQueryClient } from '@/testing';

import { LiveBadge } from '@/components';

import { LiveProvider, useEventRate, useLiveEvents, usePollInterval, type LiveEvent } from './live';
import { SESSION_STORAGE_KEY, SessionProvider } from './session';

const settle = () => act(() => new Promise((resolve) => setTimeout(resolve, 0)));

function Probe() {
  const poll = usePollInterval();
  const rate = useEventRate();
  const [seen, setSeen] = useState<LiveEvent[]>([]);
  useLiveEvents((e) => setSeen((s) => [...s, e]));
  return (
    <>
      <p data-testid="poll">{String(poll)}</p>
      <p data-testid="rate">{rate}</p>
      <p data-testid="seen">{seen.map((e) => e.type).join(',')}</p>
    </>
  );
}

function mount(streams: (() => Response)[], sleep = () => new Promise<void>(() => {})) {
  window.sessionStorage.setItem(SESSION_STORAGE_KEY, JSON.stringify({ apiKey: 'k', tenant: 't' }));
  const queryClient = testQueryClient();
  const invalidate = vi.spyOn(queryClient, 'invalidateQueries');
  const fetch = vi.fn(async () => {
    const next = streams.shift();
    return next ? next() : new Promise<Response>(() => {});
  });
  render(
    <QueryClientProvider client={queryClient}>
      <SessionProvider>
        <LiveProvider connection={{ fetch: fetch as unknown as typeof globalThis.fetch, sleep }}>
          <LiveBadge />
          <Probe />
        </LiveProvider>
      </SessionProvider>
    </QueryClientProvider>,
  );
  const keys = () => invalidate.mock.calls.map(([filters]) => filters?.queryKey);
  return { queryClient, invalidate, keys, fetch };
}

describe('LiveProvider', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('shows Connecting, then Live, and stops polling while live', async () => {
    const stream = new FakeEventStream();
    mount([() => stream.response]);
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Connecting');
    expect(screen.getByTestId('poll')).toHaveTextContent('5000');
    await settle();
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Live');
    expect(screen.getByTestId('poll')).toHaveTextContent('false');
  });

  it('invalidates the queries each event makes stale and tells listeners', async () => {
    const stream = new FakeEventStream();
    const { keys } = mount([() => stream.response]);
    await settle();

    stream.event('job.result', { jobResult: { jobId: 'j-9', status: 'JOB_STATUS_SUCCEEDED' } }, '1-0');
    stream.event('job.dlq', { jobResult: { jobId: 'j-8' } }, '1-1');
    stream.event('workflow.run', { type: 'workflow.run', runId: 'r-1', status: 'running' }, '1-2');
    stream.event('worker.heartbeat', { heartbeat: { workerId: 'w' } }, '1-3');
    await settle();

    expect(keys()).toEqual(
      expect.arrayContaining([
        ['jobs'],
        ['approvals'],
        ['overview'],
        ['job', 'j-9'],
        ['job', 'j-8'],
        ['dlq'],
        ['runs'],
        ['run', 'r-1'],
        ['workers'],
      ]),
    );
    // ['jobs'] was asked for twice within 500 ms: invalidated once so far.
    expect(keys().filter((k) => JSON.stringify(k) === '["jobs"]')).toHaveLength(1);
    expect(screen.getByTestId('seen')).toHaveTextContent('job.result,job.dlq,workflow.run,worker.heartbeat');
  });

  it('invalidates everything when the server says events were skipped', async () => {
    const stream = new FakeEventStream();
    const { invalidate } = mount([() => stream.response]);
    await settle();
    stream.event('stream.truncated', { skipped: 1200 });
    await settle();
    expect(invalidate).toHaveBeenCalledWith();
  });

  it('says Reconnecting after a drop and Polling after 3 failures, then polls', async () => {
    const stream = new FakeEventStream();
    let wake: () => void = () => {};
    const sleep = () => new Promise<void>((resolve) => (wake = resolve));
    const down = () => new Response(null, { status: 502 });
    mount([() => stream.response, down, down], sleep);
    await settle();
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Live');

    await act(async () => stream.fail());
    await settle();
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Reconnecting');
    expect(screen.getByTestId('poll')).toHaveTextContent('5000');

    await act(async () => wake());
    await settle();
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Reconnecting');
    await act(async () => wake());
    await settle();
    expect(screen.getByRole('status', { name: 'Live updates' })).toHaveTextContent('Polling');
  });

  it('counts events per second over the last 10 s', async () => {
    const stream = new FakeEventStream();
    mount([() => stream.response]);
    await settle();
    for (let i = 0; i < 25; i++) stream.event('job.progress', { jobProgress: { jobId: `j${i}` } });
    await settle();
    await act(() => new Promise((resolve) => setTimeout(resolve, 1100)));
    expect(screen.getByTestId('rate')).toHaveTextContent('2.5');
  });
});
