/** The audit page's filters: kept in the URL, sent as GET /api/v1/audit/events's query. */

export const SEVERITIES = ['CRITICAL', 'HIGH', 'MEDIUM', 'LOW', 'INFO'] as const;

export type AuditFilters = {
  /** Exact, or a prefix as `job.*`. */
  type: string;
  severity: string;
  actor: string;
  job_id: string;
  /** As a `datetime-local` input gives it (the browser's time zone). */
  from: string;
  to: string;
  search: string;
};

export const FILTER_NAMES = ['type', 'severity', 'actor', 'job_id', 'from', 'to', 'search'] as const;

export const NO_FILTERS: AuditFilters = { type: '', severity: '', actor: '', job_id: '', from: '', to: '', search: '' };

export const PAGE_SIZE = 50;

export function filtersFrom(params: URLSearchParams): AuditFilters {
  const out = { ...NO_FILTERS };
  for (const name of FILTER_NAMES) out[name] = params.get(name) ?? '';
  return out;
}

export function filtersToParams(filters: AuditFilters): URLSearchParams {
  const params = new URLSearchParams();
  for (const name of FILTER_NAMES) {
    const value = filters[name].trim();
    if (value) params.set(name, value);
  }
  return params;
}

export function hasFilters(filters: AuditFilters): boolean {
  return FILTER_NAMES.some((name) => filters[name].trim() !== '');
}

/** A `datetime-local` value as RFC 3339 (UTC); '' when it cannot be read. */
export function localToRfc3339(value: string): string {
  if (!value.trim()) return '';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? '' : date.toISOString();
}

export type AuditQuery = {
  limit: number;
  cursor?: string;
  type?: string;
  severity?: string;
  actor?: string;
  job_id?: string;
  from?: string;
  to?: string;
  search?: string;
};

/** The query of GET /api/v1/audit/events for `filters` at `cursor` (empty filters left out). */
export function auditQuery(filters: AuditFilters, cursor?: string, limit = PAGE_SIZE): AuditQuery {
  const query: AuditQuery = { limit };
  const text = (name: 'type' | 'severity' | 'actor' | 'job_id' | 'search') => filters[name].trim();
  if (text('type')) query.type = text('type');
  if (text('severity')) query.severity = text('severity').toUpperCase();
  if (text('actor')) query.actor = text('actor');
  if (text('job_id')) query.job_id = text('job_id');
  const from = localToRfc3339(filters.from);
  const to = localToRfc3339(filters.to);
  if (from) query.from = from;
  if (to) query.to = to;
  if (text('search')) query.search = text('search');
  if (cursor) query.cursor = cursor;
  return query;
}

/** The events the page's own reads append (`audit.read`, `audit.verify`). */
export const READ_TYPES = new Set(['audit.read', 'audit.verify']);
