export { TracePage } from './components/TracePage';
export { ArtifactsPage } from './components/ArtifactsPage';
export { SchemasPage } from './components/SchemasPage';
export { ConfigPage } from './components/ConfigPage';
