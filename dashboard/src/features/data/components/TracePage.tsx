import { Page } from '@/components';

/** Placeholder until the page is built. */
export function TracePage() {
  return <Page title="TracePage">Not built yet.</Page>;
}
