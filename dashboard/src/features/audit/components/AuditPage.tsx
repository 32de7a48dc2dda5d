import { Page } from '@/components';

/** Placeholder until the page is built. */
export function AuditPage() {
  return <Page title="AuditPage">Not built yet.</Page>;
}
