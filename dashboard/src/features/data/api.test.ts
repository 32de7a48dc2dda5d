import { describe, expect, it } from 'vitest';

import { artifactId, decodeContent, traceHeaders } from './api';

describe('traceHeaders', () => {
  it('reads X-Has-More and X-Total-Count', () => {
    expect(traceHeaders(new Headers({ 'X-Has-More': 'true', 'X-Total-Count': '250' }))).toEqual({
      hasMore: true,
      total: 250,
    });
    expect(traceHeaders(new Headers({ 'X-Has-More': 'false' }))).toEqual({ hasMore: false, total: null });
    expect(traceHeaders(new Headers())).toEqual({ hasMore: false, total: null });
  });
});

describe('artifactId', () => {
  it('takes the id out of a pointer', () => {
    expect(artifactId('redis://art:abc-1')).toBe('abc-1');
    expect(artifactId('art:abc-1')).toBe('abc-1');
    expect(artifactId('abc-1')).toBe('abc-1');
  });
});

describe('decodeContent', () => {
  it('decodes UTF-8 text', () => {
    const base64 = btoa(String.fromCharCode(...new TextEncoder().encode('héllo <b>')));
    expect(decodeContent(base64)).toEqual({ text: 'héllo <b>', bytes: 10, truncated: false });
  });

  it('cuts at the limit and says so', () => {
    const base64 = btoa('a'.repeat(100));
    expect(decodeContent(base64, 64)).toEqual({ text: 'a'.repeat(64), bytes: 100, truncated: true });
  });

  it('answers nothing for bad base64', () => {
    expect(decodeContent('***')).toEqual({ text: '', bytes: 0, truncated: false });
  });
});
