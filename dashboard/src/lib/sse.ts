/**
 * A Server-Sent Events parser fed with text chunks as they arrive (the WHATWG
 * "event stream interpretation": `id:`, `event:`, `data:` lines, a blank line ends an
 * event, a line starting with `:` is a comment, `\n`, `\r\n` or `\r` end a line).
 *
 * The stream is read with fetch rather than EventSource so the API key travels in a
 * header. What the server sends is bounded: an event (its data and the line being
 * read) longer than `maxEventChars` is dropped whole, so a bad server cannot grow
 * the page's memory without limit.
 */

export type SseEvent = {
  /** The last `id:` seen (the stream's, not only this event's), '' when none. */
  id: string;
  /** `event:`, else 'message'. */
  type: string;
  data: string;
};

export const DEFAULT_MAX_EVENT_CHARS = 1024 * 1024;

export type SseParserOptions = {
  maxEventChars?: number;
  /** Told each time an event is dropped for its size. */
  onOversize?: () => void;
};

export class SseParser {
  /** The id to resume from (`Last-Event-ID`): the last one set by the stream. */
  lastEventId = '';

  private readonly maxChars: number;
  private readonly onOversize?: () => void;
  private line = '';
  private data: string[] = [];
  private dataChars = 0;
  private type = '';
  private pendingId: string | null = null;
  /** A `\r` ended the last chunk: a `\n` starting the next belongs to it. */
  private afterCr = false;
  /** Dropping an oversized event: everything up to the blank line that ends it. */
  private discarding = false;
  /** Dropping the rest of an oversized line, up to its end. */
  private discardingLine = false;
  private started = false;

  constructor(
    private readonly onEvent: (event: SseEvent) => void,
    options: SseParserOptions = {},
  ) {
    this.maxChars = options.maxEventChars ?? DEFAULT_MAX_EVENT_CHARS;
    this.onOversize = options.onOversize;
  }

  /** Forgets a partly read event (the connection dropped); the last id is kept. */
  reset(): void {
    this.line = '';
    this.data = [];
    this.dataChars = 0;
    this.type = '';
    this.pendingId = null;
    this.afterCr = false;
    this.discarding = false;
    this.discardingLine = false;
    this.started = false;
  }

  push(chunk: string): void {
    let text = chunk;
    if (!this.started && text.length > 0) {
      this.started = true;
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    let start = 0;
    for (let i = 0; i < text.length; i++) {
      const ch = text.charCodeAt(i);
      if (ch === 0x0a && this.afterCr && i === start && this.line === '' && !this.discardingLine) {
        // The \n of a \r\n split across (or right after) a \r already handled.
        this.afterCr = false;
        start = i + 1;
        continue;
      }
      this.afterCr = false;
      if (ch === 0x0a || ch === 0x0d) {
        this.appendToLine(text, start, i);
        this.endLine();
        if (ch === 0x0d) {
          if (i + 1 < text.length && text.charCodeAt(i + 1) === 0x0a) i++;
          else if (i + 1 === text.length) this.afterCr = true;
        }
        start = i + 1;
      }
    }
    this.appendToLine(text, start, text.length);
  }

  private appendToLine(text: string, from: number, to: number): void {
    if (from >= to || this.discardingLine) return;
    if (this.line.length + (to - from) + this.dataChars > this.maxChars) {
      this.line = '';
      this.discardingLine = true;
      this.startDiscarding();
      return;
    }
    this.line += text.slice(from, to);
  }

  private startDiscarding(): void {
    if (!this.discarding) this.onOversize?.();
    this.discarding = true;
    this.data = [];
    this.dataChars = 0;
    this.type = '';
    this.pendingId = null;
  }

  private endLine(): void {
    const line = this.line;
    this.line = '';
    if (this.discardingLine) {
      this.discardingLine = false;
      return; // the end of the oversized line: the event stays dropped
    }
    if (line === '') {
      this.dispatch();
      return;
    }
    if (this.discarding || line.charCodeAt(0) === 0x3a /* ':' a comment, e.g. ": ping" */) return;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 0x20) value = value.slice(1);
    switch (field) {
      case 'data':
        this.data.push(value);
        this.dataChars += value.length + 1;
        if (this.dataChars > this.maxChars) this.startDiscarding();
        break;
      case 'event':
        this.type = value;
        break;
      case 'id':
        if (!value.includes('\u0000')) this.pendingId = value;
        break;
      default:
        break; // `retry:` and unknown fields: the reconnect policy is ours
    }
  }

  private dispatch(): void {
    if (this.discarding) {
      this.discarding = false;
      this.data = [];
      this.dataChars = 0;
      this.type = '';
      this.pendingId = null;
      return;
    }
    if (this.pendingId !== null) this.lastEventId = this.pendingId;
    this.pendingId = null;
    const type = this.type || 'message';
    this.type = '';
    if (this.data.length === 0) return;
    const data = this.data.join('\n');
    this.data = [];
    this.dataChars = 0;
    this.onEvent({ id: this.lastEventId, type, data });
  }
}
