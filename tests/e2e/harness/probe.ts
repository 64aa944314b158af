// Packs the small fixture extensions under tests/e2e/fixtures/ into .vsix files
// with vsce (offline), so they are installed exactly the way the real suite
// installs hookscope.vsix.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { E2E_DIR, REPO_ROOT, RUNS_DIR } from './paths.ts';

/** `probe-extension` (harness self-test) or `debugpy-standin` (the `debugpy` debug type). */
export function packFixtureExtension(name: 'probe-extension' | 'debugpy-standin'): string {
  fs.mkdirSync(RUNS_DIR, { recursive: true });
  const vsix = path.join(fs.mkdtempSync(path.join(RUNS_DIR, `${name}-vsix-`)), `${name}.vsix`);
  execFileSync(
    path.join(REPO_ROOT, 'node_modules', '.bin', 'vsce'),
    ['package', '--no-dependencies', '--allow-missing-repository', '--skip-license', '-o', vsix],
    { cwd: path.join(E2E_DIR, 'fixtures', name), stdio: 'pipe' },
  );
  return vsix;
}
