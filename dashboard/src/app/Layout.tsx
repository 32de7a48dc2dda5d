import { Suspense } from 'react';
import { Navigate, NavLink, Outlet, useLocation } from 'react-router';

import { LiveBadge, Loading, PRODUCT_NAME } from '@/components';
import { SignOutButton } from '@/features/auth';
import { LiveProvider } from '@/lib/live';
import { useSession } from '@/lib/session';

type NavItem = { to: string; label: string };

/** The main navigation, in three groups: operating, governing, and the data routes. */
const NAV: { group: string; items: NavItem[] }[] = [
  {
    group: 'Operate',
    items: [
      { to: '/', label: 'Overview' },
      { to: '/jobs', label: 'Jobs' },
      { to: '/approvals', label: 'Approvals' },
      { to: '/workflows', label: 'Workflows' },
      { to: '/runs', label: 'Runs' },
      { to: '/dlq', label: 'DLQ' },
      { to: '/workers', label: 'Workers' },
    ],
  },
  {
    group: 'Govern',
    items: [
      { to: '/policy', label: 'Policy' },
      { to: '/govern/replay', label: 'Replay' },
      { to: '/govern/analytics', label: 'Analytics' },
      { to: '/audit', label: 'Audit' },
    ],
  },
  {
    group: 'Data',
    items: [
      { to: '/traces', label: 'Traces' },
      { to: '/artifacts', label: 'Artifacts' },
      { to: '/schemas', label: 'Schemas' },
      { to: '/config', label: 'Config' },
    ],
  },
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
        <nav aria-label="Main" className="nav-groups">
          {NAV.map(({ group, items }) => (
            <div key={group} className="nav-group">
              <span className="nav-group-name" id={`nav-${group}`}>
                {group}
              </span>
              <ul className="nav-list" aria-labelledby={`nav-${group}`}>
                {items.map((item) => (
                  <li key={item.to}>
                    <NavLink to={item.to} end={item.to === '/'} className="nav-link">
                      {item.label}
                    </NavLink>
                  </li>
                ))}
              </ul>
            </div>
          ))}
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
