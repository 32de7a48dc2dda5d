export { DlqPage } from './components/DlqPage';
