import { Suspense } from 'react';
import { Navigate, NavLink, Outlet, useLocation } from 'react-router';

import { LiveBadge, Loading, PRODUCT_NAME } from '@/components';
import { SignOutButton } from '@/features/auth';
import { LiveProvider } from '@/lib/live';
import { useSession } from '@/lib/session';

const NAV: { to: string; label: string }[] = [
  { to: '/', label: 'Overview' },
  { to: '/jobs', label: 'Jobs' },
  { to: '/approvals', label: 'Approvals' },
  { to: '/workflows', label: 'Workflows' },
  { to: '/runs', label: 'Runs' },
  { to: '/dlq', label: 'DLQ' },
  { to: '/workers', label: 'Workers' },
];

/** Signed-in pages only: anyone else goes to the sign-in page, and comes back after. */
export function RequireSession() {
  const { session } = useSession();
  const location = useLocation();
  if (!session) {
    return <Navigate to="/sign-in" replace state={{ from: location.pathname + location.search }} />;
  }
  return (
    <LiveProvider>
      <Outlet />
    </LiveProvider>
  );
}

/** The frame of every signed-in page: skip link, header with navigation, main. */
export function Layout() {
  const { session } = useSession();
  return (
    <div className="shell">
      <a className="skip-link" href="#main">
        Skip to main content
      </a>
      <header className="app-header">
        <div className="brand">
          <span className="brand-name">{PRODUCT_NAME}</span>
          <span className="brand-sub">control plane</span>
        </div>
        <nav aria-label="Main">
          <ul className="nav-list">
            {NAV.map((item) => (
              <li key={item.to}>
                <NavLink to={item.to} end={item.to === '/'} className="nav-link">
                  {item.label}
                </NavLink>
              </li>
            ))}
          </ul>
        </nav>
        <div className="header-tools">
          <LiveBadge />
          {session && <span className="tenant">Tenant: {session.tenant}</span>}
          <SignOutButton />
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        <Suspense fallback={<Loading />}>
          <Outlet />
        </Suspense>
      </main>
    </div>
  );
}
