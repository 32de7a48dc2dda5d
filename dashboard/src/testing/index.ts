export { json, mockFetch, type FakeRoute, type SentRequest } from './fetch';
export { renderPage, TEST_SESSION, testQueryClient, type RenderPageOptions } from './render';
export { FakeEventStream } from './sse';
