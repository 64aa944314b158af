// Where the Python side that ships inside the .vsix lives (built by `make bundle`):
//   bundled/tool/hookscope   the hookscope package (from the wheel), with its bootstrap folder
//   bundled/libs/            its pinned pure-Python libraries (bundled/requirements.txt):
//                            msgpack, debugpy, pygls and pygls's dependencies
// A development build without `make bundle` has neither; Hookscope then uses the interpreter's own.

import { existsSync } from 'node:fs';
import * as path from 'node:path';

export interface BundledPython {
  /** Folder holding the hookscope package: first on the language server's path, after the bootstrap in the debuggee. */
  toolDir: string;
  /** The pure-Python libraries: the language server's path; the debuggee takes from it only what it lacks (HOOKSCOPE_LIBS). */
  libsDir: string;
  /** The bootstrap folder of the bundled package, prepended to the debuggee's PYTHONPATH. */
  bootstrapDir: string;
  /** debugpy's adapter, run as `python <adapter>` the way the Python debugger extension runs its bundled copy. */
  debugpyAdapter: string;
}

export function bundledPython(extensionPath: string): BundledPython | undefined {
  const root = path.join(extensionPath, 'bundled');
  const toolDir = path.join(root, 'tool');
  const libsDir = path.join(root, 'libs');
  const bundle: BundledPython = {
    toolDir,
    libsDir,
    bootstrapDir: path.join(toolDir, 'hookscope', 'bootstrap'),
    debugpyAdapter: path.join(libsDir, 'debugpy', 'adapter'),
  };
  return existsSync(bundle.bootstrapDir) && existsSync(bundle.debugpyAdapter) ? bundle : undefined;
}

/** The language server's PYTHONPATH entries: the bundled package and libraries first (none without a bundle). */
export function languageServerPath(bundle: BundledPython | undefined): string[] {
  return bundle ? [bundle.toolDir, bundle.libsDir] : [];
}
