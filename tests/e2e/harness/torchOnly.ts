// A stranger's interpreter: a fresh venv holding torch and nothing else Hookscope could use (no
// hookscope, debugpy, msgpack, pygls, NumPy or matplotlib). Built once (`python3 -m venv` + the
// pinned CPU torch wheel, tens of seconds) and kept under .e2e/ for later runs; checked every time.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { REPO_ROOT } from './paths.ts';

const VENV = path.join(REPO_ROOT, '.e2e', 'venv-torch-only');
const STAMP = path.join(VENV, '.torch-only-stamp');
const TORCH = 'torch==2.13.0';
/** What the .vsix must bring itself: none of these may be importable in this venv. */
export const ABSENT = ['hookscope', 'debugpy', 'msgpack', 'pygls', 'lsprotocol', 'numpy', 'matplotlib'];

/** The venv's python, built if needed; throws if it holds anything but torch of what Hookscope uses. */
export function torchOnlyPython(): string {
  const python = path.join(VENV, 'bin', 'python');
  if (!fs.existsSync(STAMP)) {
    fs.rmSync(VENV, { recursive: true, force: true });
    execFileSync('python3', ['-m', 'venv', VENV], { stdio: 'inherit', timeout: 120_000 });
    execFileSync(python, ['-m', 'pip', 'install', '-q', '--disable-pip-version-check', TORCH], { stdio: 'inherit', timeout: 900_000 });
    fs.writeFileSync(STAMP, `${TORCH}\n`);
  }
  const script = `import importlib.util as u, json; print(json.dumps({n: u.find_spec(n) is not None for n in ${JSON.stringify(['torch', ...ABSENT])}}))`;
  const found = JSON.parse(execFileSync(python, ['-c', script], { encoding: 'utf8', cwd: VENV, timeout: 60_000 })) as Record<string, boolean>;
  const extra = ABSENT.filter((name) => found[name]);
  if (!found.torch || extra.length) throw new Error(`${VENV} must hold torch only: torch=${found.torch}, also has ${extra.join(', ') || 'nothing'}`);
  return python;
}
