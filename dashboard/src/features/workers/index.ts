export { WorkersPage } from './components/WorkersPage';
