// What Hookscope needs from the user's Python interpreter, as pure functions: the one-shot probe
// script, reading its answer, and the words for what is missing.
//
// With the hookscope package bundled in the extension (the default), the interpreter needs only
// a recent Python and torch; the package and its pure-Python libraries come from the .vsix. With
// `hookscope.backend: "environment"` it must also have its own hookscope package. Nothing else
// is ever asked of it, and nothing is offered for install but what is really missing.

/** Which hookscope package runs: the extension's own copy, or the interpreter's (`hookscope.backend`). */
export type BackendSource = 'bundled' | 'environment';

/** The oldest Python the backend supports (pyproject.toml's requires-python). */
export const MIN_PYTHON: readonly [number, number] = [3, 10];

/** What an interpreter lacks for Hookscope, if anything. */
export type InterpreterProblem = 'no-interpreter' | 'python-too-old' | 'no-torch' | 'no-hookscope';

/** One probe's answer, read from the script's JSON line. */
export interface ProbeAnswer {
  version: [number, number, number];
  torch: boolean;
  /** The bootstrap folder of the interpreter's own hookscope (asked for with the environment source). */
  bootstrap?: string;
  /** Why the interpreter's hookscope did not import. */
  hookscopeError?: string;
}

/**
 * Run with `python -c`: one JSON line. find_spec imports nothing (torch is not loaded); the
 * interpreter's hookscope is imported (cheaply: it loads torch lazily) only when it will be used.
 */
export function probeScript(source: BackendSource): string {
  const lines = [
    'import importlib.util as u, json, sys',
    'r = {"version": list(sys.version_info[:3]), "torch": u.find_spec("torch") is not None}',
  ];
  if (source === 'environment') {
    lines.push(
      'try:',
      '    import hookscope.bootstrap as b',
      '    r["bootstrap"] = b.path()',
      'except Exception as e:',
      '    r["hookscopeError"] = type(e).__name__ + ": " + str(e)',
    );
  }
  lines.push('print(json.dumps(r))');
  return lines.join('\n');
}

/** The probe's answer from its stdout (the last line that parses), or undefined. */
export function parseProbe(stdout: string): ProbeAnswer | undefined {
  for (const line of stdout.trim().split(/\r?\n/).reverse()) {
    try {
      const value = JSON.parse(line) as Partial<ProbeAnswer>;
      if (Array.isArray(value.version) && typeof value.torch === 'boolean') return value as ProbeAnswer;
    } catch {
      // other output (a user's sitecustomize printing): look further up
    }
  }
  return undefined;
}

/** What is missing for `source`, most basic first; undefined when the interpreter will do. */
export function problemOf(answer: ProbeAnswer, source: BackendSource): InterpreterProblem | undefined {
  const [major, minor] = answer.version;
  if (major < MIN_PYTHON[0] || (major === MIN_PYTHON[0] && minor < MIN_PYTHON[1])) return 'python-too-old';
  if (!answer.torch) return 'no-torch';
  if (source === 'environment' && !answer.bootstrap) return 'no-hookscope';
  return undefined;
}

/** The detail shown with a problem (the interpreter's version, the import error...). */
export function problemDetail(answer: ProbeAnswer, problem: InterpreterProblem): string {
  if (problem === 'python-too-old') return `Python ${answer.version.join('.')}`;
  if (problem === 'no-hookscope') return answer.hookscopeError ?? 'hookscope is not importable';
  return '';
}

/** The sentence a notification says: what is missing, in which interpreter, and what that turns off. */
export function problemMessage(problem: InterpreterProblem, python: string, detail: string): string {
  const off = 'so layer breakpoints, break on NaN/Inf and tensor summaries are off for this debug session.';
  switch (problem) {
    case 'no-interpreter':
      return `Hookscope could not run the Python interpreter "${python}" (${detail}), ${off} Pick the interpreter your training runs in.`;
    case 'python-too-old':
      return `Hookscope needs Python ${MIN_PYTHON.join('.')} or newer; "${python}" is ${detail}, ${off} Pick a newer interpreter.`;
    case 'no-torch':
      return `The Python interpreter "${python}" has no torch (PyTorch), ${off} Pick the interpreter your training runs in.`;
    case 'no-hookscope':
      return `hookscope.backend is "environment", but the Python interpreter "${python}" has no hookscope package (${detail}), ${off} ` +
        'Install the hookscope wheel there, or use the hookscope bundled with the extension.';
  }
}
