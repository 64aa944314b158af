// Workflow 8 of issue 6, faults:
// (a) stopping the debug session mid-run leaves no process and a clean
//     extension state (status bar and panel back to "not connected");
// (b) an interpreter without torch (a bare venv; the hookscope package, debugpy
//     and the rest come with the extension) gets a notification that names the
//     interpreter and what it lacks, never offers to install hookscope, and
//     whose Select Interpreter button picks another: the next session connects.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { RUNS_DIR, VENV_PYTHON } from '../harness/paths.ts';
import { findRunProcesses } from '../harness/processes.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';

describe('faults: stopping mid-run', function () {
  const session = sessionSteps(() => startHookscopeRun('fault-stop'));

  it('8a. stopping the debug session mid-run leaves no process and a clean state', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('cnn.py');
    const started = trace.mark();
    await dbg.start('Hookscope: CNN (long run)');
    const hello = await trace.waitForEvent('backend hello', isEvent('hello'), { after: started, timeoutMs: 90_000 });
    await trace.waitForEvent('model found', isEvent('modelAdded'), { after: started, timeoutMs: 90_000 });
    await workbench.waitForStatusBar('connected', /Hookscope: 1 process · 1 model/);
    await panel.show();
    await workbench.screenshot('running');

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('process exited', isEvent('process.exited'), { after: stoppedAt, timeoutMs: 60_000 });
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
    const run = session.run();
    await waitFor('the debuggee and the debug adapter to exit', () => {
      const left = findRunProcesses(run.codeServer!.marks()).filter((p) => /cnn\.py|debugpy/.test(p.cmdline) || p.pid === hello.pid);
      return left.length === 0;
    }, { timeoutMs: 30_000 });
    await workbench.waitForStatusBar('not connected', /Hookscope: not connected/);
    await panel.waitForHeadline(/Not connected/);
    await workbench.screenshot('stopped-clean');
  });
});

describe('faults: an interpreter without torch', function () {
  let bareVenv = '';
  const session = sessionSteps(() => {
    bareVenv = path.join(RUNS_DIR, `bare-venv-${Date.now()}`);
    execFileSync('python3', ['-m', 'venv', '--without-pip', bareVenv]);
    return startHookscopeRun('fault-no-torch', { pythonPath: path.join(bareVenv, 'bin', 'python') });
  });

  it('8b. names the interpreter and what it lacks, and Select Interpreter picks another', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const python = path.join(bareVenv, 'bin', 'python');
    await workbench.openFile('cnn.py');
    await workbench.runCommand('Debug: Select and Start Debugging');
    await workbench.pickQuickPickItem('Hookscope: CNN');
    const unsuitable = await trace.waitForEvent('interpreter unsuitable', isEvent('python.unsuitable'), { timeoutMs: 90_000 });
    assert.equal(unsuitable.python, python);
    assert.equal(unsuitable.problem, 'no-torch');
    const toast = await workbench.waitForNotification(/has no torch/);
    const text = await toast.innerText();
    assert.ok(text.includes(python), `the notification names the interpreter: ${text}`);
    assert.doesNotMatch(text, /pip install|hookscope package/i, 'nothing but torch is said to be missing');
    const buttons = await toast.locator('.monaco-button').allInnerTexts();
    assert.deepEqual(buttons.filter((b) => /install/i.test(b)), [], `no install offer: ${buttons.join(', ')}`);
    await workbench.screenshot('no-torch-notification');
    // Select Interpreter: the path typed in becomes hookscope.pythonPath.
    await toast.locator('.monaco-button', { hasText: 'Select Interpreter' }).click();
    assert.equal(await workbench.answerInputBox(VENV_PYTHON), python, 'the box shows the current interpreter');
    await trace.waitForEvent('interpreter selected', isEvent('python.selected', { python: VENV_PYTHON }));

    // That first session went on without Hookscope (the bundled debugpy runs it) and stopped on `import torch`.
    await dbg.waitForPaused({ timeoutMs: 60_000 });
    await dbg.stop();
    await dbg.waitForSessionEnd();

    // The next session, with the interpreter picked, connects.
    const started = trace.mark();
    await dbg.start('Hookscope: CNN');
    const configured = await trace.waitForEvent('session configured', isEvent('session.configured', { type: 'hookscope' }), { after: started });
    assert.equal(configured.python, VENV_PYTHON);
    await trace.waitForEvent('backend hello', isEvent('hello'), { after: started, timeoutMs: 90_000 });
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: started, timeoutMs: 120_000 });
    await dbg.waitForSessionEnd();
  });
});
