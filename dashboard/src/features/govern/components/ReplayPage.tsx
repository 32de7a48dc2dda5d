import { Page } from '@/components';

/** Placeholder until the page is built. */
export function ReplayPage() {
  return <Page title="ReplayPage">Not built yet.</Page>;
}
