import { Page } from '@/components';

/** Placeholder until the page is built. */
export function ApprovalDetailPage() {
  return <Page title="Approval">Not built yet.</Page>;
}
