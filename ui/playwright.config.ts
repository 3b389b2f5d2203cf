import { defineConfig } from '@playwright/test'

// Browser tests of the UI against a real corvo server (e2e/server.ts starts
// bin/corvo in a temp dir). The browser is Debian's chromium
// (scripts/ensure-chromium.sh installs it); playwright's own browser
// downloads are not used.
export default defineConfig({
  testDir: 'e2e',
  timeout: 60_000,
  expect: { timeout: 15_000 },
  fullyParallel: false,
  workers: 1,
  retries: 0,
  reporter: process.env.CI ? [['list']] : [['list']],
  globalSetup: './e2e/global-setup.ts',
  outputDir: 'test-results',
  use: {
    baseURL: process.env.CORVO_E2E_URL,
    launchOptions: {
      executablePath: process.env.CORVO_CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
    },
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
  },
})
