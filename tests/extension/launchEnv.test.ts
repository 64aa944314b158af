// How Hookscope joins a Python launch configuration without touching what the user wrote.
import { strict as assert } from 'node:assert';
import {
  LIBS_ENV,
  SESSION_KEY_PROPERTY,
  configuredPython,
  injectHookscope,
  isInjected,
  prependPath,
  withHookscopeRule,
  type PythonLaunchConfig,
} from '../../extension/src/debug/launchEnv';

const params = {
  env: { HOOKSCOPE_ADDR: '127.0.0.1:4000', HOOKSCOPE_TOKEN: 'tok', HOOKSCOPE_SESSION: 'key' },
  bootstrapDir: '/site/hookscope/bootstrap',
  inheritedPythonPath: '/inherited',
  pathSeparator: ':',
  sessionKey: 'key',
};

describe('debug: launch configuration injection', () => {
  it('adds env, prepends the bootstrap to the user PYTHONPATH and appends the include rule', () => {
    const user: PythonLaunchConfig = {
      type: 'debugpy', request: 'launch', name: 'train', program: '/w/train.py',
      env: { PYTHONPATH: '/mine:/other', CUDA_VISIBLE_DEVICES: '0' },
      rules: [{ path: '/w/vendor', include: false }],
    };
    const frozen = JSON.stringify(user);
    const out = injectHookscope(user, params);
    assert.equal(JSON.stringify(user), frozen, 'the input configuration is not modified');
    assert.deepEqual(out.env, {
      PYTHONPATH: '/site/hookscope/bootstrap:/mine:/other', CUDA_VISIBLE_DEVICES: '0',
      HOOKSCOPE_ADDR: '127.0.0.1:4000', HOOKSCOPE_TOKEN: 'tok', HOOKSCOPE_SESSION: 'key',
    });
    assert.deepEqual(out.rules, [{ module: 'hookscope', include: false }, { path: '/w/vendor', include: false }]);
    assert.equal(out.program, '/w/train.py');
    assert.equal(out[SESSION_KEY_PROPERTY], 'key');
    assert.equal(isInjected(out), true);
    assert.equal(isInjected(user), false);
  });

  it('keeps the inherited PYTHONPATH when the configuration sets none, and is idempotent', () => {
    const once = injectHookscope<PythonLaunchConfig>({ type: 'python', request: 'launch' }, params);
    assert.equal(once.env!.PYTHONPATH, '/site/hookscope/bootstrap:/inherited');
    const twice = injectHookscope(once, { ...params, env: { ...params.env, HOOKSCOPE_TOKEN: 'new' } });
    assert.equal(twice.env!.PYTHONPATH, '/site/hookscope/bootstrap:/inherited');
    assert.equal(twice.env!.HOOKSCOPE_TOKEN, 'new');
    assert.equal(twice.rules!.length, 1);
    const none = injectHookscope<PythonLaunchConfig>({ type: 'python', request: 'launch' }, { ...params, inheritedPythonPath: undefined });
    assert.equal(none.env!.PYTHONPATH, '/site/hookscope/bootstrap');
  });

  it('names the bundled libraries with the bundled hookscope, and drops a stale name without them', () => {
    const bundled = injectHookscope<PythonLaunchConfig>({ type: 'debugpy', request: 'launch' }, { ...params, libsDir: '/ext/bundled/libs' });
    assert.equal(bundled.env![LIBS_ENV], '/ext/bundled/libs');
    assert.equal(bundled.env!.PYTHONPATH, '/site/hookscope/bootstrap:/inherited', 'the libraries never go on PYTHONPATH');
    const environment = injectHookscope(bundled, params);
    assert.equal(LIBS_ENV in environment.env!, false);
  });

  it('respects a rule the user wrote about hookscope', () => {
    const rules = [{ module: 'hookscope', include: true }];
    assert.deepEqual(withHookscopeRule(rules), rules);
    assert.deepEqual(withHookscopeRule(undefined), [{ module: 'hookscope', include: false }]);
  });

  it('prepends without duplicates or empty entries (Windows separator too)', () => {
    assert.equal(prependPath('B', 'A;;B;C', ';'), 'B;A;C');
    assert.equal(prependPath('B', '', ':'), 'B');
  });

  it('reads the interpreter a configuration names', () => {
    assert.equal(configuredPython({ type: 'debugpy', python: '/v/bin/python' }), '/v/bin/python');
    assert.equal(configuredPython({ type: 'debugpy', python: ['/v/bin/python', '-X', 'dev'] }), '/v/bin/python');
    assert.equal(configuredPython({ type: 'python', pythonPath: ' /old/python ' }), '/old/python');
    assert.equal(configuredPython({ type: 'debugpy' }), undefined);
  });
});
