export { ApprovalsPage } from './components/ApprovalsPage';
export { ApprovalDetailPage } from './components/ApprovalDetailPage';
