import { Page } from '@/components';

/** Placeholder until the page is built. */
export function ArtifactsPage() {
  return <Page title="ArtifactsPage">Not built yet.</Page>;
}
