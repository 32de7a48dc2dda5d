import { isRouteErrorResponse, Link, useRouteError } from 'react-router';

import { ErrorState, Page } from '@/components';

/** A page that failed to render or to load (a new release replaced its file, say). */
export function RouteError() {
  const error = useRouteError();
  if (isRouteErrorResponse(error) && error.status === 404) return <NotFoundPage />;
  return (
    <Page title="Something went wrong">
      <ErrorState error={error} retry={() => window.location.reload()} title="This page could not be shown" />
    </Page>
  );
}

export function NotFoundPage() {
  return (
    <Page title="Page not found">
      <p>
        Nothing lives at this address. <Link to="/">Go to the overview</Link>.
      </p>
    </Page>
  );
}
