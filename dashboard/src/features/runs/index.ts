export { RunDetailPage } from './components/RunDetailPage';
export { RunsPage } from './components/RunsPage';
