export { ApprovalsPage } from './components/ApprovalsPage';
