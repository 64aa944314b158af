// How Hookscope adds itself to a Python launch configuration, as pure functions.
//
// It adds the backend's environment (address, token, session, and where the bundled libraries
// are), prepends the bootstrap directory to PYTHONPATH (keeping the user's), and appends a debugpy rule that includes
// the `hookscope` module so justMyCode does not swallow its stops. What the user wrote
// is kept: their env values win except for the HOOKSCOPE_* variables, their PYTHONPATH
// is extended rather than replaced, and their own rule about `hookscope` is respected.

export interface DebugRule {
  module?: string;
  path?: string;
  include: boolean;
}

export interface PythonLaunchConfig {
  type: string;
  request?: string;
  name?: string;
  env?: Record<string, string | null | undefined>;
  rules?: DebugRule[];
  [key: string]: unknown;
}

export interface InjectionParams {
  /** HOOKSCOPE_ADDR / HOOKSCOPE_TOKEN / HOOKSCOPE_SESSION. */
  env: Record<string, string>;
  /** The bootstrap folder of the hookscope that runs: the bundled one's, or <site-packages>/hookscope/bootstrap. */
  bootstrapDir: string;
  /** The bundled pure-Python libraries (HOOKSCOPE_LIBS): the debuggee takes from them only what it lacks. */
  libsDir?: string;
  /** PYTHONPATH the debuggee would inherit when the configuration does not set one. */
  inheritedPythonPath?: string;
  /** ':' on POSIX, ';' on Windows. */
  pathSeparator: string;
  /** Our key for this session, stored in the configuration to find it again when it starts. */
  sessionKey: string;
  /** `hookscope.tensorPresentation`: tensors as one summary line in the debugger's views (HOOKSCOPE_TENSOR_VIEW). */
  tensorPresentation?: boolean;
}

/** Where the debuggee's bootstrap finds the bundled libraries (backend/hookscope/bootstrap/hookscope_boot.py). */
export const LIBS_ENV = 'HOOKSCOPE_LIBS';

/** Configuration property carrying Hookscope's session key (ignored by debugpy). */
export const SESSION_KEY_PROPERTY = 'hookscopeSession';

/** PYTHONPATH with `dir` first, the rest kept in order, duplicates of `dir` and empty entries dropped. */
export function prependPath(dir: string, existing: string | undefined | null, separator: string): string {
  const rest = (existing ?? '').split(separator).filter((p) => p !== '' && p !== dir);
  return [dir, ...rest].join(separator);
}

/**
 * The rules with Hookscope's exclude-rule first, unless some rule already names the module: a stop is
 * shown in the user's code and Hookscope's own frames stay out of the Call Stack and of stepping.
 */
export function withHookscopeRule(rules: readonly DebugRule[] | undefined): DebugRule[] {
  const existing = [...(rules ?? [])];
  const mentioned = existing.some((r) => r.module === 'hookscope' || (r.module ?? '').startsWith('hookscope.'));
  return mentioned ? existing : [{ module: 'hookscope', include: false }, ...existing];
}

/** A copy of `config` with Hookscope added; the input object is not modified. */
export function injectHookscope<T extends PythonLaunchConfig>(config: T, params: InjectionParams): T {
  const userEnv = { ...(config.env ?? {}) };
  const userPythonPath = 'PYTHONPATH' in userEnv ? userEnv.PYTHONPATH : params.inheritedPythonPath;
  const env: Record<string, string | null | undefined> = {
    ...userEnv,
    ...params.env,
    PYTHONPATH: prependPath(params.bootstrapDir, userPythonPath, params.pathSeparator),
  };
  if (params.libsDir) env[LIBS_ENV] = params.libsDir;
  else delete env[LIBS_ENV];
  if (params.tensorPresentation !== undefined) env.HOOKSCOPE_TENSOR_VIEW = params.tensorPresentation ? '1' : '0';
  return {
    ...config,
    env,
    rules: withHookscopeRule(config.rules),
    [SESSION_KEY_PROPERTY]: params.sessionKey,
  };
}

/** Whether a configuration already went through injectHookscope (a restart reuses it). */
export function isInjected(config: PythonLaunchConfig): boolean {
  return typeof config[SESSION_KEY_PROPERTY] === 'string';
}

/** The interpreter a Python launch configuration names itself (`python` may be a string or an argv list). */
export function configuredPython(config: PythonLaunchConfig): string | undefined {
  const python = config.python ?? config.pythonPath;
  if (typeof python === 'string' && python.trim()) return python.trim();
  if (Array.isArray(python) && typeof python[0] === 'string' && python[0].trim()) return python[0].trim();
  return undefined;
}

/** Defaults for Hookscope's own `hookscope` debug type when launch.json has no entry (F5 on a file). */
export function defaultHookscopeLaunch(program: string | undefined): PythonLaunchConfig {
  return {
    type: 'hookscope',
    request: 'launch',
    name: 'Hookscope: Current File',
    program: program ?? '${file}',
    console: 'integratedTerminal',
    justMyCode: true,
  };
}
