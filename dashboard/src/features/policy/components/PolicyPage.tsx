import { Page } from '@/components';

/** Placeholder until the page is built. */
export function PolicyPage() {
  return <Page title="PolicyPage">Not built yet.</Page>;
}
