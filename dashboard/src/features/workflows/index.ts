export { WorkflowDetailPage } from './components/WorkflowDetailPage';
export { WorkflowsPage } from './components/WorkflowsPage';
