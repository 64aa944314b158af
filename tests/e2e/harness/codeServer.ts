// Starts and stops one code-server (VS Code in a browser) for a test run: its
// own HOME/XDG folders, user data and extensions folders inside the run folder,
// 127.0.0.1 on a free port, in a process group of its own (spawned detached,
// i.e. setsid) so that stopping it kills everything it started.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as net from 'node:net';
import * as path from 'node:path';
import { CODE_SERVER_ENTRY, NODE24 } from './paths.ts';
import { findRunProcesses, describeProcesses, type RunMarks } from './processes.ts';
import { waitFor } from './wait.ts';

export interface CodeServerOptions {
  /** Folder that holds everything of this run (home, user data, extensions, logs). */
  runDir: string;
  /** VS Code user settings (written to <user-data>/User/settings.json). */
  userSettings: Record<string, unknown>;
  /** .vsix files or unpacked extension folders to install before starting. */
  extensions: string[];
  /** `NAME=value` added to the environment to recognise the run's processes. */
  envMarker: string;
  /** Fixed port (studio); a free ephemeral port when omitted. */
  port?: number;
}

export interface CodeServer {
  url: string;
  port: number;
  pgid: number;
  logFile: string;
  userDataDir: string;
  extensionsDir: string;
  /** Kills the process group and waits until no process of the run is left; throws if some survive. */
  stop(): Promise<void>;
  marks(): RunMarks;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as net.AddressInfo).port;
      server.close(() => resolve(port));
    });
  });
}

/** Environment for code-server and everything under it: HOME and XDG folders inside the run. */
export function runEnvironment(runDir: string, envMarker: string): NodeJS.ProcessEnv {
  const home = path.join(runDir, 'home');
  const xdg = {
    XDG_CONFIG_HOME: path.join(home, '.config'),
    XDG_DATA_HOME: path.join(home, '.local', 'share'),
    XDG_CACHE_HOME: path.join(home, '.cache'),
    XDG_STATE_HOME: path.join(home, '.local', 'state'),
    XDG_RUNTIME_DIR: path.join(runDir, 'xdg-runtime'),
  };
  for (const dir of [home, ...Object.values(xdg)]) fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const [markerName, markerValue] = envMarker.split('=');
  const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, ...xdg, [markerName]: markerValue };
  // Never let code-server pick up a password or a proxy from the caller's environment.
  delete env.PASSWORD;
  delete env.HASHED_PASSWORD;
  delete env.VSCODE_PROXY_URI;
  return env;
}

function codeServerArgs(userDataDir: string, extensionsDir: string): string[] {
  return [
    CODE_SERVER_ENTRY,
    '--user-data-dir', userDataDir,
    '--extensions-dir', extensionsDir,
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-workspace-trust',
  ];
}

function installExtensions(options: CodeServerOptions, env: NodeJS.ProcessEnv, userDataDir: string, extensionsDir: string): void {
  for (const extension of options.extensions) {
    if (fs.statSync(extension).isDirectory()) {
      // An unpacked folder loads when it sits in the extensions folder.
      fs.cpSync(extension, path.join(extensionsDir, path.basename(extension)), { recursive: true });
      continue;
    }
    const result = spawnSync(NODE24, [...codeServerArgs(userDataDir, extensionsDir), '--install-extension', extension, '--force'], {
      env,
      encoding: 'utf8',
      timeout: 120_000,
    });
    fs.appendFileSync(path.join(options.runDir, 'install-extension.log'), `${result.stdout}\n${result.stderr}\n`);
    if (result.status !== 0) {
      throw new Error(`installing ${extension} failed (exit ${result.status}):\n${result.stdout}\n${result.stderr}`);
    }
  }
}

function httpOk(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    const request = http.get(url, (response) => {
      response.resume();
      resolve((response.statusCode ?? 500) < 400);
    });
    request.on('error', () => resolve(false));
    request.setTimeout(2_000, () => {
      request.destroy();
      resolve(false);
    });
  });
}

export async function startCodeServer(options: CodeServerOptions): Promise<CodeServer> {
  for (const file of [NODE24, CODE_SERVER_ENTRY]) {
    if (!fs.existsSync(file)) throw new Error(`${file} is missing: run tests/e2e/setup.sh first`);
  }
  const env = runEnvironment(options.runDir, options.envMarker);
  const userDataDir = path.join(options.runDir, 'user-data');
  const extensionsDir = path.join(options.runDir, 'extensions');
  fs.mkdirSync(extensionsDir, { recursive: true });
  // code-server is a "remote" window: settings with `"scope": "machine"` (hookscope.traceFile)
  // are read from Machine/settings.json only, the rest from User/settings.json. Write both.
  for (const scope of ['User', 'Machine']) {
    fs.mkdirSync(path.join(userDataDir, scope), { recursive: true });
    fs.writeFileSync(path.join(userDataDir, scope, 'settings.json'), JSON.stringify(options.userSettings, null, 2));
  }
  installExtensions(options, env, userDataDir, extensionsDir);

  const port = options.port ?? (await freePort());
  const logFile = path.join(options.runDir, 'code-server.log');
  const log = fs.openSync(logFile, 'a');
  const child: ChildProcess = spawn(
    NODE24,
    [
      ...codeServerArgs(userDataDir, extensionsDir),
      '--bind-addr', `127.0.0.1:${port}`,
      '--auth', 'none',
      '--reconnection-grace-time', '10',
      '--log', 'info',
    ],
    // detached: the child calls setsid() and leads a new process group, so one
    // kill(-pgid) reaches the extension host, the debug adapter and the debuggee.
    { env, cwd: options.runDir, detached: true, stdio: ['ignore', log, log] },
  );
  fs.closeSync(log);
  const pgid = child.pid!;
  let exitCode: number | null = null;
  child.on('exit', (code, signal) => {
    exitCode = code ?? (signal ? 128 : 0);
  });

  const url = `http://127.0.0.1:${port}`;
  const marks = (): RunMarks => ({ pgid, runDir: options.runDir, envMarker: options.envMarker });

  const stop = async (): Promise<void> => {
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-pgid, signal);
      } catch {
        /* the group is already gone */
      }
    };
    signalGroup('SIGTERM');
    try {
      await waitFor('code-server process group to exit after SIGTERM', () => findRunProcesses(marks()).length === 0, { timeoutMs: 8_000 });
    } catch {
      signalGroup('SIGKILL');
      // Processes that left the group (none should) are found by the other marks and killed one by one.
      for (const p of findRunProcesses(marks())) {
        try {
          process.kill(p.pid, 'SIGKILL');
        } catch {
          /* gone meanwhile */
        }
      }
    }
    await waitFor('no process of the run left', () => findRunProcesses(marks()).length === 0, { timeoutMs: 10_000 }).catch(() => {
      throw new Error(`processes of the run survived stopping code-server:\n${describeProcesses(findRunProcesses(marks()))}`);
    });
  };

  try {
    await waitFor(`code-server to answer on ${url}/healthz`, async () => {
      if (exitCode !== null) throw new Error(`code-server exited with ${exitCode}; see ${logFile}`);
      return httpOk(`${url}/healthz`);
    }, { timeoutMs: 60_000, intervalMs: 250 });
  } catch (error) {
    await stop().catch(() => undefined);
    const logTail = fs.readFileSync(logFile, 'utf8').split('\n').slice(-30).join('\n');
    throw new Error(`${(error as Error).message}\n--- code-server log ---\n${logTail}`);
  }
  return { url, port, pgid, logFile, userDataDir, extensionsDir, stop, marks };
}
