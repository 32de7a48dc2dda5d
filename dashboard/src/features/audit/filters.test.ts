import { describe, expect, it } from 'vitest';

import { auditQuery, filtersFrom, filtersToParams, localToRfc3339, NO_FILTERS } from './filters';

describe('audit filters', () => {
  it('sends only the filters given, trimmed, with the severity upper-cased', () => {
    expect(auditQuery(NO_FILTERS)).toEqual({ limit: 50 });
    expect(
      auditQuery({ ...NO_FILTERS, type: ' job.* ', severity: 'high', actor: 'alice', job_id: 'job-1', search: 'prod' }, 'c-9'),
    ).toEqual({ limit: 50, type: 'job.*', severity: 'HIGH', actor: 'alice', job_id: 'job-1', search: 'prod', cursor: 'c-9' });
  });

  it('sends from and to as RFC 3339', () => {
    const query = auditQuery({ ...NO_FILTERS, from: '2026-01-01T10:00', to: '2026-01-02T10:00:30' });
    expect(query.from).toBe(new Date('2026-01-01T10:00').toISOString());
    expect(query.to).toBe(new Date('2026-01-02T10:00:30').toISOString());
    expect(localToRfc3339('not a date')).toBe('');
  });

  it('round-trips through the URL', () => {
    const filters = { ...NO_FILTERS, type: 'approval.*', job_id: 'j 1' };
    expect(filtersFrom(filtersToParams(filters))).toEqual(filters);
    expect(filtersToParams(NO_FILTERS).toString()).toBe('');
  });
});
