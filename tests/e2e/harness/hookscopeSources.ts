// The file names of the hookscope package, read from backend/hookscope: what a user must never meet
// at a stop (a Call Stack row, an editor tab). Read, not listed, so a module added or moved by a
// restructure is covered without editing the specs.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { REPO_ROOT, VENV_PYTHON } from './paths.ts';

/** The .py file names below `dir` (installed packages left out: the standard library's folder holds them). */
function pyNames(dir: string): Set<string> {
  const names = new Set<string>();
  const walk = (d: string): void => {
    for (const entry of fs.readdirSync(d, { withFileTypes: true })) {
      if (entry.isDirectory()) {
        if (entry.name !== 'site-packages' && entry.name !== 'dist-packages') walk(path.join(d, entry.name));
      }
      else if (entry.name.endsWith('.py')) names.add(entry.name);
    }
  };
  walk(dir);
  return names;
}

/**
 * A pattern matching a Call Stack row or an editor tab that names one of Hookscope's own .py files.
 * Names that torch or the standard library also have (hooks.py, config.py, select.py…) are left
 * out: a frame of theirs is not Hookscope's. `spare`: the workspace's own file names.
 */
export function hookscopeFilePattern(spare: readonly string[] = []): RegExp {
  const [stdlib, torchDir] = execFileSync(VENV_PYTHON, ['-c',
    'import os, sysconfig, torch; print(sysconfig.get_paths()["stdlib"]); print(os.path.dirname(torch.__file__))',
  ], { encoding: 'utf8' }).trim().split('\n');
  const shared = new Set([...pyNames(stdlib), ...pyNames(torchDir), ...spare]);
  const own = [...pyNames(path.join(REPO_ROOT, 'backend', 'hookscope'))].filter((n) => !shared.has(n)).sort();
  const escaped = own.map((n) => n.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`(^|[\\s/\\\\])(${escaped.join('|')})\\b`);
}
