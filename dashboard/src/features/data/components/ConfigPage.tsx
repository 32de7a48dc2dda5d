import { Page } from '@/components';

/** Placeholder until the page is built. */
export function ConfigPage() {
  return <Page title="ConfigPage">Not built yet.</Page>;
}
