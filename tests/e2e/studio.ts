// `make studio`: a local VS Code (code-server on 127.0.0.1 only) with the
// Hookscope .vsix installed and the examples workspace open; prints the URL and
// runs until Ctrl+C, then stops code-server's whole process group.
// State (settings, layer breakpoints, the workspace copy) persists in .e2e/studio/.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { freePort, startCodeServer } from './harness/codeServer.ts';
import { EXAMPLES_DIR, HOOKSCOPE_VSIX, REPO_ROOT, VENV_PYTHON } from './harness/paths.ts';
import { BASE_SETTINGS } from './harness/session.ts';
import { hookscopeSettings, launchJson } from './harness/workspace.ts';

const studioDir = path.join(REPO_ROOT, '.e2e', 'studio');
const workspaceDir = path.join(studioDir, 'workspace');

async function main(): Promise<void> {
  for (const [file, hint] of [[HOOKSCOPE_VSIX, "run 'make package'"], [VENV_PYTHON, "run 'make setup-python'"]]) {
    if (!fs.existsSync(file)) throw new Error(`${file} not found: ${hint} (make studio does both)`);
  }
  // Refresh the examples (a user's own new files in the workspace are kept) and the launch configurations.
  fs.mkdirSync(workspaceDir, { recursive: true });
  fs.cpSync(EXAMPLES_DIR, workspaceDir, { recursive: true, filter: (src) => !src.includes('__pycache__') });
  fs.mkdirSync(path.join(workspaceDir, '.vscode'), { recursive: true });
  fs.writeFileSync(path.join(workspaceDir, '.vscode', 'launch.json'), launchJson());

  const wanted = Number(process.env.HOOKSCOPE_STUDIO_PORT ?? 8765);
  const port = (await portIsFree(wanted)) ? wanted : await freePort();
  const server = await startCodeServer({
    runDir: studioDir,
    extensions: [HOOKSCOPE_VSIX],
    envMarker: `HOOKSCOPE_STUDIO=${process.pid}`,
    port,
    userSettings: { ...BASE_SETTINGS, 'debug.internalConsoleOptions': 'openOnSessionStart', ...hookscopeSettings() },
  });
  const url = `${server.url}/?folder=${encodeURIComponent(workspaceDir)}`;
  console.log(`\nHookscope studio is running (127.0.0.1 only):\n\n    ${url}\n`);
  console.log('Open it in a browser, pick "Hookscope: CNN" in Run and Debug and press F5.');
  console.log('From another machine: ssh -L ' + `${port}:127.0.0.1:${port}` + ' <this host>, then open the URL there.');
  console.log(`Logs: ${server.logFile}\nPress Ctrl+C to stop.`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`\n${signal}: stopping code-server...`);
    try {
      await server.stop();
      console.log('stopped; no process left.');
      process.exit(0);
    } catch (error) {
      console.error((error as Error).message);
      process.exit(1);
    }
  };
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGHUP', () => void stop('SIGHUP'));
  // Keep the event loop alive until a signal arrives.
  setInterval(() => undefined, 1 << 30);
}

function portIsFree(port: number): Promise<boolean> {
  return import('node:net').then(
    (net) =>
      new Promise<boolean>((resolve) => {
        const probe = net.createServer();
        probe.once('error', () => resolve(false));
        probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
      }),
  );
}

main().catch((error) => {
  console.error(`[studio] ${(error as Error).message}`);
  process.exit(1);
});
