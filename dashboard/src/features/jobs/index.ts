export { JobDetailPage } from './components/JobDetailPage';
export { JobsPage } from './components/JobsPage';
