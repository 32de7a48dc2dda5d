/// <reference types="vitest/config" />
import { fileURLToPath, URL } from 'node:url';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

// `npm run dev` only: /api goes to the console server of a running stack
// (CORDUM_CONSOLE_URL of .cordum/local.env), which routes the REST API and the live
// stream, so the pages talk to one origin as they do in production.
const consoleUrl = process.env.CORDUM_CONSOLE_URL ?? 'http://127.0.0.1:8080';

export default defineConfig({
  base: '/',
  plugins: [react()],
  server: {
    proxy: {
      '/api': { target: consoleUrl, changeOrigin: true },
      '/health': { target: consoleUrl, changeOrigin: true },
    },
  },
  resolve: {
    alias: { '@': fileURLToPath(new URL('./src', import.meta.url)) },
  },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    // The CSP allows scripts and styles from 'self' only: nothing is inlined.
    assetsInlineLimit: 0,
    reportCompressedSize: true,
  },
  test: {
    environment: 'jsdom',
    globals: true,
    setupFiles: ['./src/testing/setup.ts'],
    css: false,
    restoreMocks: true,
    unstubGlobals: true,
  },
});
