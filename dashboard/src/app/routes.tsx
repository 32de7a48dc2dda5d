/**
 * The dashboard's routes. Every page is loaded on first visit (React.lazy), so the
 * first load carries only the shell; the run graph's libraries load with the run page.
 */

import { lazy, type ComponentType } from 'react';
import { createBrowserRouter, type RouteObject } from 'react-router';

import { SignInPage } from '@/features/auth';

import { Layout, RequireSession } from './Layout';
import { NotFoundPage, RouteError } from './RouteError';

/** A named export of a lazily imported module as a lazy component. */
function page<M>(load: () => Promise<M>, name: keyof M) {
  return lazy(async () => ({ default: (await load())[name] as ComponentType }));
}

const OverviewPage = page(() => import('@/features/overview'), 'OverviewPage');
const JobsPage = page(() => import('@/features/jobs'), 'JobsPage');
const JobDetailPage = page(() => import('@/features/jobs'), 'JobDetailPage');
const ApprovalsPage = page(() => import('@/features/approvals'), 'ApprovalsPage');
const DlqPage = page(() => import('@/features/dlq'), 'DlqPage');
const WorkersPage = page(() => import('@/features/workers'), 'WorkersPage');
const WorkflowsPage = page(() => import('@/features/workflows'), 'WorkflowsPage');
const WorkflowDetailPage = page(() => import('@/features/workflows'), 'WorkflowDetailPage');
const RunsPage = page(() => import('@/features/runs'), 'RunsPage');
const RunDetailPage = page(() => import('@/features/runs'), 'RunDetailPage');
const ApprovalDetailPage = page(() => import('@/features/approvals'), 'ApprovalDetailPage');
const PolicyPage = page(() => import('@/features/policy'), 'PolicyPage');
const BundlePage = page(() => import('@/features/policy'), 'BundlePage');
const AuditPage = page(() => import('@/features/audit'), 'AuditPage');
const ReplayPage = page(() => import('@/features/govern'), 'ReplayPage');
const AnalyticsPage = page(() => import('@/features/govern'), 'AnalyticsPage');
const TracePage = page(() => import('@/features/data'), 'TracePage');
const ArtifactsPage = page(() => import('@/features/data'), 'ArtifactsPage');
const SchemasPage = page(() => import('@/features/data'), 'SchemasPage');
const ConfigPage = page(() => import('@/features/data'), 'ConfigPage');

/** The paths of the pages, for links outside a feature. */
export const PATHS = {
  signIn: '/sign-in',
  overview: '/',
  jobs: '/jobs',
  approvals: '/approvals',
  workflows: '/workflows',
  runs: '/runs',
  dlq: '/dlq',
  workers: '/workers',
  policy: '/policy',
  replay: '/govern/replay',
  analytics: '/govern/analytics',
  audit: '/audit',
  traces: '/traces',
  artifacts: '/artifacts',
  schemas: '/schemas',
  config: '/config',
} as const;

export const routes: RouteObject[] = [
  { path: PATHS.signIn, element: <SignInPage />, errorElement: <RouteError /> },
  {
    element: <RequireSession />,
    errorElement: <RouteError />,
    children: [
      {
        element: <Layout />,
        children: [
          {
            errorElement: <RouteError />,
            children: [
              { index: true, element: <OverviewPage /> },
              { path: 'jobs', element: <JobsPage /> },
              { path: 'jobs/:id', element: <JobDetailPage /> },
              { path: 'approvals', element: <ApprovalsPage /> },
              { path: 'approvals/:id', element: <ApprovalDetailPage /> },
              { path: 'policy', element: <PolicyPage /> },
              { path: 'policy/bundles/:id', element: <BundlePage /> },
              { path: 'govern/replay', element: <ReplayPage /> },
              { path: 'govern/analytics', element: <AnalyticsPage /> },
              { path: 'audit', element: <AuditPage /> },
              { path: 'traces', element: <TracePage /> },
              { path: 'traces/:id', element: <TracePage /> },
              { path: 'artifacts', element: <ArtifactsPage /> },
              { path: 'schemas', element: <SchemasPage /> },
              { path: 'config', element: <ConfigPage /> },
              { path: 'dlq', element: <DlqPage /> },
              { path: 'workers', element: <WorkersPage /> },
              { path: 'workflows', element: <WorkflowsPage /> },
              { path: 'workflows/:id', element: <WorkflowDetailPage /> },
              { path: 'runs', element: <RunsPage /> },
              { path: 'runs/:id', element: <RunDetailPage /> },
              { path: '*', element: <NotFoundPage /> },
            ],
          },
        ],
      },
    ],
  },
];

export function createAppRouter() {
  return createBrowserRouter(routes);
}
