import { describe, expect, it } from 'vitest';

import { formatBytes, formatDuration, formatOffset } from './format';

describe('formatBytes', () => {
  it('shows bytes, then binary units with one decimal below ten', () => {
    expect(formatBytes(0)).toBe('0 B');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1023)).toBe('1023 B');
    expect(formatBytes(1024)).toBe('1 KiB');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(64 * 1024)).toBe('64 KiB');
    expect(formatBytes(4 * 1024 * 1024)).toBe('4 MiB');
    expect(formatBytes(5 * 1024 ** 3)).toBe('5 GiB');
    expect(formatBytes(2.25 * 1024 ** 4)).toBe('2.3 TiB');
  });

  it('shows nothing for a missing or impossible size', () => {
    expect(formatBytes(undefined)).toBe('');
    expect(formatBytes(null)).toBe('');
    expect(formatBytes(-1)).toBe('');
    expect(formatBytes(Number.NaN)).toBe('');
  });
});

describe('formatDuration', () => {
  it('picks a unit by size', () => {
    expect(formatDuration(0)).toBe('0 ms');
    expect(formatDuration(350)).toBe('350 ms');
    expect(formatDuration(4200)).toBe('4.2 s');
    expect(formatDuration(60_000)).toBe('1 min');
    expect(formatDuration(182_000)).toBe('3 min 2 s');
    expect(formatDuration(3_900_000)).toBe('1 h 5 min');
    expect(formatDuration(7_200_000)).toBe('2 h');
    expect(formatDuration(-5)).toBe('0 ms');
    expect(formatDuration(undefined)).toBe('');
  });

  it('writes offsets from an axis start', () => {
    expect(formatOffset(0)).toBe('+0 s');
    expect(formatOffset(1200)).toBe('+1.2 s');
  });
});
