// Packs the throwaway probe extension (tests/e2e/fixtures/probe-extension) into
// a .vsix with vsce (offline), so the harness self-test installs it exactly the
// way the real suite installs hookscope.vsix.
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { PROBE_EXTENSION_DIR, REPO_ROOT } from './paths.ts';

export function packProbeExtension(outDir: string): string {
  const vsix = path.join(outDir, 'e2e-probe.vsix');
  execFileSync(
    path.join(REPO_ROOT, 'node_modules', '.bin', 'vsce'),
    ['package', '--no-dependencies', '--allow-missing-repository', '--skip-license', '-o', vsix],
    { cwd: PROBE_EXTENSION_DIR, stdio: 'pipe' },
  );
  return vsix;
}
