/**
 * The live event stream's connection: `GET /api/v1/stream` as Server-Sent Events,
 * read with fetch so the key goes in a header, resumed after a drop with
 * `Last-Event-ID` so nothing is missed (docs/stream.md).
 *
 * States: 'connecting' until the first answer; 'live' while the stream is open;
 * 'reconnecting' after a drop or a refused attempt; 'polling' once
 * {@link ReconnectPolicy.failuresBeforePolling} attempts in a row have failed: the
 * pages then poll while the connection keeps being tried in the background.
 */

import { SseParser, DEFAULT_MAX_EVENT_CHARS } from './sse';

export type LiveState = 'connecting' | 'live' | 'reconnecting' | 'polling';

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- a frame is whatever the server sent
export type LiveEvent = { id: string; type: string; data: any };

export const STREAM_PATH = '/api/v1/stream';

/** When to try again. */
export type ReconnectPolicy = {
  /** The wait after the first failure, in ms. */
  initialDelayMs: number;
  /** Each further failure in a row multiplies the wait by this. */
  multiplier: number;
  /** The longest wait, in ms. */
  maxDelayMs: number;
  /** Failures in a row after which the state is 'polling'. */
  failuresBeforePolling: number;
};

export const DEFAULT_RECONNECT: ReconnectPolicy = {
  initialDelayMs: 1000,
  multiplier: 2,
  maxDelayMs: 30_000,
  failuresBeforePolling: 3,
};

export function reconnectDelay(failures: number, policy: ReconnectPolicy = DEFAULT_RECONNECT): number {
  const delay = policy.initialDelayMs * policy.multiplier ** Math.max(0, failures - 1);
  return Math.min(policy.maxDelayMs, delay);
}

export type LiveConnectionOptions = {
  apiKey: string;
  tenant: string;
  onEvent: (event: LiveEvent) => void;
  onState: (state: LiveState) => void;
  policy?: ReconnectPolicy;
  maxEventChars?: number;
  fetch?: typeof fetch;
  /** Waits `ms` or until `signal` aborts (tests pass one that does not wait). */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
};

function defaultSleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
    signal.addEventListener('abort', done, { once: true });
  });
}

function parseData(data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    return data;
  }
}

/** Opens the stream and keeps it open until {@link LiveConnection.close}. */
export class LiveConnection {
  private readonly controller = new AbortController();
  private readonly parser: SseParser;
  private state: LiveState | null = null;
  private reader: ReadableStreamDefaultReader<Uint8Array> | null = null;
  private failures = 0;
  private readonly policy: ReconnectPolicy;
  private readonly doFetch: typeof fetch;
  private readonly sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  /** Settles when the connection loop has stopped. */
  readonly done: Promise<void>;

  constructor(private readonly options: LiveConnectionOptions) {
    this.policy = options.policy ?? DEFAULT_RECONNECT;
    this.doFetch = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.sleep = options.sleep ?? defaultSleep;
    this.parser = new SseParser(
      (e) => options.onEvent({ id: e.id, type: e.type, data: parseData(e.data) }),
      { maxEventChars: options.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS },
    );
    this.done = this.run();
  }

  close(): void {
    this.controller.abort();
    // The abort ends fetch's body too; a reader of another body is cancelled here.
    void this.reader?.cancel().catch(() => {});
  }

  get lastEventId(): string {
    return this.parser.lastEventId;
  }

  private setState(state: LiveState): void {
    if (this.state === state || this.controller.signal.aborted) return;
    this.state = state;
    this.options.onState(state);
  }

  private async run(): Promise<void> {
    const signal = this.controller.signal;
    this.setState('connecting');
    while (!signal.aborted) {
      try {
        await this.readOnce(signal);
      } catch {
        // a refused answer or a dropped connection: both are tried again below
      }
      if (signal.aborted) break;
      this.failures += 1;
      this.setState(this.failures >= this.policy.failuresBeforePolling ? 'polling' : 'reconnecting');
      await this.sleep(reconnectDelay(this.failures, this.policy), signal);
    }
  }

  private async readOnce(signal: AbortSignal): Promise<void> {
    const headers: Record<string, string> = {
      Accept: 'text/event-stream',
      'X-API-Key': this.options.apiKey,
      'X-Tenant-ID': this.options.tenant,
    };
    this.parser.reset();
    if (this.parser.lastEventId) headers['Last-Event-ID'] = this.parser.lastEventId;
    const response = await this.doFetch(STREAM_PATH, { headers, signal, cache: 'no-store' });
    if (!response.ok || !response.body) {
      await response.body?.cancel().catch(() => {});
      throw new Error(`stream answered ${response.status}`);
    }
    const type = response.headers.get('Content-Type') ?? '';
    if (!type.toLowerCase().startsWith('text/event-stream')) {
      await response.body.cancel().catch(() => {});
      throw new Error(`stream answered ${type || 'no content type'}`);
    }
    this.failures = 0;
    this.setState('live');
    const reader = response.body.getReader();
    this.reader = reader;
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        this.parser.push(decoder.decode(value, { stream: true }));
      }
    } finally {
      this.reader = null;
      reader.releaseLock();
    }
  }
}
