import { Page } from '@/components';

/** Placeholder until the page is built. */
export function AnalyticsPage() {
  return <Page title="AnalyticsPage">Not built yet.</Page>;
}
