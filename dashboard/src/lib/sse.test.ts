import { describe, expect, it, vi } from 'vitest';

import { SseParser, type SseEvent } from './sse';

function parse(chunks: string[], options = {}) {
  const events: SseEvent[] = [];
  const parser = new SseParser((e) => events.push(e), options);
  for (const chunk of chunks) parser.push(chunk);
  return { events, parser };
}

describe('SseParser', () => {
  it('reads id, event type and data, and keeps the last id', () => {
    const { events, parser } = parse([
      'retry: 2000\n\n',
      'id: 1700000000000-0\nevent: job.submit\ndata: {"jobRequest":{"jobId":"j1"}}\n\n',
      'id: 1700000000000-1\nevent: job.result\ndata: {}\n\n',
    ]);
    expect(events).toEqual([
      { id: '1700000000000-0', type: 'job.submit', data: '{"jobRequest":{"jobId":"j1"}}' },
      { id: '1700000000000-1', type: 'job.result', data: '{}' },
    ]);
    expect(parser.lastEventId).toBe('1700000000000-1');
  });

  it('joins data lines with a newline', () => {
    const { events } = parse(['data: first\ndata: second\ndata:third\n\n']);
    expect(events).toEqual([{ id: '', type: 'message', data: 'first\nsecond\nthird' }]);
  });

  it('skips comments such as the keepalive ping', () => {
    const { events } = parse([': ping\n\n', 'event: job.progress\n: a comment inside\ndata: x\n\n', ': ping\n\n']);
    expect(events).toEqual([{ id: '', type: 'job.progress', data: 'x' }]);
  });

  it('assembles events split at any point across chunks', () => {
    const text = 'id: 7\nevent: workflow.run\ndata: {"runId":"r1",\ndata: "status":"running"}\n\n';
    for (let cut = 1; cut < text.length; cut++) {
      const { events } = parse([text.slice(0, cut), text.slice(cut)]);
      expect(events, `cut at ${cut}`).toEqual([
        { id: '7', type: 'workflow.run', data: '{"runId":"r1",\n"status":"running"}' },
      ]);
    }
    const { events } = parse(text.split(''));
    expect(events).toHaveLength(1);
  });

  it('accepts \\r\\n and \\r line ends, even with \\r\\n split across chunks', () => {
    const { events } = parse(['id: a\r\nevent: t\r', '\ndata: one\r\r', 'data: two\r\n\r\n']);
    expect(events).toEqual([
      { id: 'a', type: 't', data: 'one' },
      { id: 'a', type: 'message', data: 'two' },
    ]);
  });

  it('dispatches nothing for an event without data, but keeps its id', () => {
    const { events, parser } = parse(['id: 42\nevent: nothing\n\n']);
    expect(events).toEqual([]);
    expect(parser.lastEventId).toBe('42');
  });

  it('ignores a byte order mark at the start', () => {
    const { events } = parse(['\uFEFFdata: x\n\n']);
    expect(events).toEqual([{ id: '', type: 'message', data: 'x' }]);
  });

  it('drops an event over the size bound and goes on with the next', () => {
    const onOversize = vi.fn();
    const big = 'x'.repeat(200);
    const { events, parser } = parse(
      [`id: 1\nevent: big\ndata: ${big}\ndata: more\n\n`, 'id: 2\nevent: small\ndata: ok\n\n'],
      { maxEventChars: 100, onOversize },
    );
    expect(events).toEqual([{ id: '2', type: 'small', data: 'ok' }]);
    expect(parser.lastEventId).toBe('2');
    expect(onOversize).toHaveBeenCalledTimes(1);
  });

  it('never buffers more than the bound for a line that does not end', () => {
    const events: SseEvent[] = [];
    const parser = new SseParser((e) => events.push(e), { maxEventChars: 1000 });
    parser.push('data: ');
    for (let i = 0; i < 1000; i++) parser.push('y'.repeat(1000)); // 1 MB without a newline
    // Internal state stays bounded: the partial line was dropped.
    expect((parser as unknown as { line: string }).line.length).toBeLessThanOrEqual(1000);
    parser.push('\n\nevent: after\ndata: fine\n\n');
    expect(events).toEqual([{ id: '', type: 'after', data: 'fine' }]);
  });

  it('bounds the data of many short lines too', () => {
    const events: SseEvent[] = [];
    const parser = new SseParser((e) => events.push(e), { maxEventChars: 50 });
    for (let i = 0; i < 100; i++) parser.push('data: 0123456789\n');
    parser.push('\n');
    parser.push('data: next\n\n');
    expect(events).toEqual([{ id: '', type: 'message', data: 'next' }]);
  });

  it('forgets a partly read event on reset, keeping the last id', () => {
    const events: SseEvent[] = [];
    const parser = new SseParser((e) => events.push(e));
    parser.push('id: 5\ndata: whole\n\nid: 6\ndata: half');
    parser.reset();
    parser.push('data: fresh\n\n');
    expect(events.map((e) => e.data)).toEqual(['whole', 'fresh']);
    expect(parser.lastEventId).toBe('5');
  });
});
