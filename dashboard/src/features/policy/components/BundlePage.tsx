import { Page } from '@/components';

/** Placeholder until the page is built. */
export function BundlePage() {
  return <Page title="BundlePage">Not built yet.</Page>;
}
