// Launches Debian's Chromium headless through playwright-core with a fresh
// profile in the run folder and the flags that keep it off the (closed) network.
import * as path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM } from './paths.ts';

export interface BrowserSession {
  context: BrowserContext;
  page: Page;
  close(): Promise<void>;
}

export const VIEWPORT = { width: 1600, height: 1200 };

export async function launchBrowser(runDir: string, env: NodeJS.ProcessEnv): Promise<BrowserSession> {
  const context = await chromium.launchPersistentContext(path.join(runDir, 'chromium-profile'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: VIEWPORT,
    env: env as Record<string, string>,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
    // The clipboard is used to read the Debug Console / notifications text reliably.
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    close: async () => {
      await context.close().catch(() => undefined);
    },
  };
}
