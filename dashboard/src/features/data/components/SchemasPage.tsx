import { Page } from '@/components';

/** Placeholder until the page is built. */
export function SchemasPage() {
  return <Page title="SchemasPage">Not built yet.</Page>;
}
