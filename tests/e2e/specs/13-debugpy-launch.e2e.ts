// Launch configurations users already have keep working (issue 19): a launch.json written for the
// Python Debugger extension — `"type": "debugpy"`, and the older `"type": "python"` — gets Hookscope
// with no edit. The Python Debugger extension (ms-python.debugpy) cannot be installed here; the
// stand-in under tests/e2e/fixtures/debugpy-standin contributes those debug types the way it does
// (package.json contribution, a DebugAdapterDescriptorFactory running `python -m debugpy.adapter`
// with the configured interpreter). The interpreter is the repo's venv, which has its own
// (editable) hookscope: the bundled one runs anyway, as `hookscope.backend` defaults to.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { VENV_PYTHON } from '../harness/paths.ts';
import { packFixtureExtension } from '../harness/probe.ts';
import { isEvent, type TraceLog } from '../harness/trace.ts';
import { Workbench } from '../harness/workbench.ts';

const LAUNCHES = [
  { name: 'Python Debugger: CNN', script: 'cnn.py', type: 'debugpy' },
  { name: 'Python (deprecated type): CNN', script: 'cnn.py', type: 'python' },
];

describe('the Python Debugger\'s launch configurations, unedited', function () {
  const session = sessionSteps(() => startHookscopeRun('debugpy-launch', {
    extraExtensions: [packFixtureExtension('debugpy-standin')],
    launches: { targets: LAUNCHES, type: 'debugpy' },
    settings: { 'debugpyStandIn.python': VENV_PYTHON },
  }));
  const launchJsonPath = () => path.join(session.run().workspaceDir, '.vscode', 'launch.json');
  let launchJsonBefore = '';

  /** Start `name`, wait for its stop in conv2's backward, check what Hookscope did, and stop it. */
  async function stopsInConv2(workbench: Workbench, trace: TraceLog, name: string, type: string): Promise<void> {
    const dbg = new Debugger(workbench);
    const started = trace.mark();
    await dbg.start(name);
    const configured = await trace.waitForEvent(`${type} session configured by Hookscope`, isEvent('session.configured', { type }), { after: started });
    assert.equal(configured.python, VENV_PYTHON, 'the interpreter the stand-in filled in');
    assert.equal(configured.backend, 'bundled');
    await trace.waitForEvent('backend hello', isEvent('hello'), { after: started, timeoutMs: 120_000 });
    await trace.waitForEvent('hit in conv2 (backward)', isEvent('hit', { layer: 'conv2', phase: 'backward', pausing: true }), { after: started, timeoutMs: 120_000 });
    await dbg.waitForPaused();
    const cnn = path.join(session.run().workspaceDir, 'cnn.py');
    await workbench.waitForActiveEditor('cnn.py', Workbench.lineOf(cnn, 'self.conv2(x)'));
    await dbg.waitForStackFrame(/conv2 · backward/);
    assert.match(await dbg.waitForVariable(/^grad_output\b/), /grad_output/);
    // The venv has hookscope installed (editable checkout), yet the bundled copy is the one running.
    const where = await dbg.evaluate("__import__('hookscope').__file__");
    assert.match(where, /extensions[\\/]hookscope\.hookscope-[^\\/]+[\\/]bundled[\\/]tool[\\/]hookscope[\\/]__init__\.py/);
    await workbench.screenshot(`paused-in-conv2-${type}`);
    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  }

  it('a. "type": "debugpy": a layer breakpoint stops in conv2 with the bundled hookscope', async function () {
    const { workbench, trace } = session.run();
    launchJsonBefore = fs.readFileSync(launchJsonPath(), 'utf8');
    await workbench.openFile('cnn.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.goToLine(Workbench.lineOf(path.join(session.run().workspaceDir, 'cnn.py'), 'self.conv2 = nn.Conv2d('));
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled on', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });
    await stopsInConv2(workbench, trace, 'Python Debugger: CNN', 'debugpy');
  });

  it('b. "type": "python" (the deprecated type) does the same, and launch.json is never edited', async function () {
    const { workbench, trace } = session.run();
    await stopsInConv2(workbench, trace, 'Python (deprecated type): CNN', 'python');
    assert.equal(fs.readFileSync(launchJsonPath(), 'utf8'), launchJsonBefore);
  });
});
