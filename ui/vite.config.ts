/// <reference types="vitest/config" />
import { defineConfig } from 'vite'

// The UI is served by corvo under /ui/. `npm run dev` serves it on :5173 and
// proxies the API to a local server (CORVO_URL, default http://127.0.0.1:8080).
const target = process.env.CORVO_URL ?? 'http://127.0.0.1:8080'

export default defineConfig({
  base: '/ui/',
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: process.env.CORVO_UI_OUT ?? 'dist',
    emptyOutDir: true,
    target: 'es2022',
    sourcemap: false,
    reportCompressedSize: true,
  },
  server: {
    proxy: {
      // changeOrigin sends the server its own Host; the page's Origin
      // (:5173) would then look foreign, and corvo refuses cross-origin
      // writes: the proxy speaks for the page, so it drops the Origin.
      '/api': { target, changeOrigin: true, configure: (proxy) => proxy.on('proxyReq', (req) => req.removeHeader('origin')) },
      '/healthz': { target, changeOrigin: true },
    },
  },
  test: {
    environment: 'node', // component tests opt into jsdom per file
    include: ['src/**/*.test.{ts,tsx}'],
  },
})
