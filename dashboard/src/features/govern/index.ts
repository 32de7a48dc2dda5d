export { ReplayPage } from './components/ReplayPage';
export { AnalyticsPage } from './components/AnalyticsPage';
