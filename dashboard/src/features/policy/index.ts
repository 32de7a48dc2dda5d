export { PolicyPage } from './components/PolicyPage';
export { BundlePage } from './components/BundlePage';
