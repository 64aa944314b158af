// The examples workspace as the tests and `make studio` open it: a copy of
// examples/ plus a .vscode/launch.json with one Hookscope launch configuration
// per example (the `hookscope` debug type runs `python -m debugpy.adapter`, so
// no Python extension is needed), and the user settings that point Hookscope at
// the repository's virtual environment.
import { VENV_PYTHON } from './paths.ts';

export interface LaunchTarget {
  /** Configuration name shown in Run and Debug (and picked by the tests). */
  name: string;
  /** Script relative to the workspace folder (or, with `module`, the module's first argument). */
  script: string;
  args?: string[];
  /** Run this module (`python -m`), e.g. torch.distributed.run for torchrun, with the script as an argument. */
  module?: string;
  /** debugpy's justMyCode (default true, as in a new launch.json). */
  justMyCode?: boolean;
  /** This configuration's debug type, when not the file's (e.g. `python` beside `debugpy`). */
  type?: string;
}

export const EXAMPLE_LAUNCHES: LaunchTarget[] = [
  { name: 'Hookscope: CNN', script: 'cnn.py' },
  { name: 'Hookscope: CNN (long run)', script: 'cnn.py', args: ['--steps', '100000'] },
  { name: 'Hookscope: NaN', script: 'nan.py' },
  { name: 'Hookscope: Transformer', script: 'transformer.py' },
  { name: 'Hookscope: compiled (long run)', script: 'compiled.py', args: ['--backend', 'eager', '--steps', '100000', '--step-seconds', '0.1'] },
  {
    name: 'Hookscope: DDP (torchrun, 2 ranks)',
    module: 'torch.distributed.run',
    script: 'ddp.py',
    args: ['--standalone', '--nproc_per_node', '2'],
  },
];

export function launchJson(targets: LaunchTarget[] = EXAMPLE_LAUNCHES, type = 'hookscope'): string {
  const configurations = targets.map((t) => ({
    name: t.name,
    type: t.type ?? type,
    request: 'launch',
    ...(t.module
      ? { module: t.module, args: [...(t.args ?? []), `\${workspaceFolder}/${t.script}`] }
      : { program: `\${workspaceFolder}/${t.script}`, args: t.args ?? [] }),
    console: 'internalConsole',
    justMyCode: t.justMyCode ?? true,
  }));
  return JSON.stringify({ version: '0.2.0', configurations }, null, 2) + '\n';
}

/** Hookscope's settings for a run: the repo's venv interpreter (or another), and the trace file. */
export function hookscopeSettings(options: { traceFile?: string; pythonPath?: string } = {}): Record<string, unknown> {
  const settings: Record<string, unknown> = {
    'hookscope.pythonPath': options.pythonPath ?? VENV_PYTHON,
    // Where the Python extension is installed it is asked for its interpreter;
    // here it is not, but keep its setting consistent for anything that reads it.
    'python.defaultInterpreterPath': options.pythonPath ?? VENV_PYTHON,
  };
  if (options.traceFile) settings['hookscope.traceFile'] = options.traceFile;
  return settings;
}
