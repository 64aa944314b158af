// Workflows 1-3 of issue 6 in one code-server, as consecutive steps of one user:
// (1) debug the CNN example with the standard launch configuration: the status
//     bar shows the process connected and the model found, the Layers tree lists
//     the model's layers;
// (2) cursor on a layer's definition line, toggle a backward layer breakpoint
//     from the palette, run: VS Code stops in that layer, shown at the user's
//     line that calls conv2 (never Hookscope's source); the Call Stack names
//     the stop "conv2 · backward" above the user's frames and no Hookscope
//     frame; Variables show grad_output; the Debug Console evaluates
//     grad_output[0].norm(); the Tensors panel shows that layer's gradient
//     summary (the same norm) and a histogram;
// (3) continue, remove the breakpoint, the run finishes and nothing is left.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { hookscopeFilePattern } from '../harness/hookscopeSources.ts';
import { REPO_ROOT } from '../harness/paths.ts';
import { findRunProcesses } from '../harness/processes.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

/** Files of the hookscope package a user must never meet at a stop. */
const HOOKSCOPE_FILES = hookscopeFilePattern(['cnn.py']);

describe('debugging the CNN example with a layer breakpoint', function () {
  const session = sessionSteps(() => startHookscopeRun('debugging'));
  const cnn = () => path.join(session.run().workspaceDir, 'cnn.py');

  it('1. starts debugging: status bar connected with the model, Layers tree lists the layers', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('cnn.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.waitForStatusBar('not connected', /Hookscope: not connected/);
    // A plain line breakpoint after the first forward keeps the program alive while we look.
    await workbench.goToLine(Workbench.lineOf(cnn(), 'loss.backward()'));
    await workbench.page.keyboard.press('F9');
    await dbg.start('Hookscope: CNN');
    await trace.waitForEvent('session configured by Hookscope', isEvent('session.configured', { type: 'hookscope' }));
    await trace.waitForEvent('backend hello', isEvent('hello'));
    const model = await trace.waitForEvent('model found', isEvent('modelAdded', { cls: 'SmallCNN' }));
    assert.ok((model.modules as number) >= 8, `SmallCNN has at least 8 modules, the trace says ${model.modules}`);
    await dbg.waitForPaused();
    assert.match((await dbg.pausedLabel()) ?? '', /breakpoint/i);
    await workbench.waitForStatusBar('1 process, 1 model', /Hookscope: 1 process · 1 model/);

    // Make room for the Layers tree as a user would: fold Watch and Breakpoints.
    await workbench.collapseView('Watch');
    await workbench.collapseView('Breakpoints');
    await workbench.expandView('Layers');
    const rows = await waitFor('the Layers tree to list conv1, conv2 and the classifier', async () => {
      await workbench.expandAllTreeRows('Layers');
      const text = (await workbench.allTreeRows('Layers')).join('\n');
      return /conv1/.test(text) && /conv2/.test(text) && /classifier/.test(text) && /Conv2d/.test(text) ? text : false;
    }, { timeoutMs: 60_000 });
    assert.match(rows, /bn1/);
    await workbench.screenshot('connected-layers-tree');

    // Remove the line breakpoint and let this first run finish.
    await workbench.goToLine(Workbench.lineOf(cnn(), 'loss.backward()'));
    await workbench.page.keyboard.press('F9');
    const ended = trace.mark();
    await dbg.continue();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: ended, timeoutMs: 120_000 });
    await dbg.waitForSessionEnd();
    await workbench.waitForStatusBar('not connected again', /Hookscope: not connected/);
  });

  it('2. a backward layer breakpoint set from the palette stops in that layer with grad_output everywhere', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('cnn.py');
    const conv2Line = Workbench.lineOf(cnn(), 'self.conv2 = nn.Conv2d(');
    await workbench.goToLine(conv2Line);
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    const toggled = await trace.waitForEvent('breakpoint toggled on', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });
    assert.equal(toggled.line, conv2Line - 1);
    assert.equal(toggled.phase, 'backward');
    await workbench.screenshot('layer-breakpoint-set');

    const started = trace.mark();
    await dbg.start('Hookscope: CNN');
    const resolved = await trace.waitForEvent('breakpoint resolved to conv2', (e) => e.event === 'breakpoints.resolved' &&
      JSON.stringify(e.resolved).includes('conv2'), { after: started, timeoutMs: 90_000 });
    assert.doesNotMatch(JSON.stringify(resolved.resolved), /"error"/);
    const hit = await trace.waitForEvent('hit in conv2 (backward)', isEvent('hit', { layer: 'conv2', phase: 'backward', pausing: true }), { after: started, timeoutMs: 90_000 });
    await dbg.waitForPaused();
    assert.match(String(hit.reason), /conv2/);

    // The editor shows the user's line that calls conv2, and Hookscope's own source never opens.
    await workbench.waitForActiveEditor('cnn.py', Workbench.lineOf(cnn(), 'self.conv2(x)'));
    const stack = await dbg.waitForStackFrame(/train|main/);  // the user's frames, under the stop frame
    const frames = stack.filter((r) => /\.py/.test(r));
    assert.match(frames[0] ?? '', /conv2 · backward.*cnn\.py/, `the stop frame is on top, in cnn.py: ${stack.join(' | ')}`);
    assert.deepEqual(frames.filter((r) => HOOKSCOPE_FILES.test(r)), [], `no Hookscope frame in the Call Stack: ${stack.join(' | ')}`);
    assert.deepEqual((await workbench.editorTabs()).all.filter((t) => HOOKSCOPE_FILES.test(t)), [], 'no Hookscope source open');
    const gradOutput = await dbg.waitForVariable(/^grad_output\b/);
    assert.match(gradOutput, /grad_output/);
    const layerVar = await dbg.waitForVariable(/^layer\b/);
    assert.match(layerVar, /conv2/);
    await workbench.screenshot('paused-in-conv2-backward');

    const norm = await dbg.evaluate('grad_output[0].norm()');
    // The console prints the tensor (plain `tensor(0.0384)` or Hookscope's compact form `tensor f32 cpu x=[0.03844]`).
    assert.match(norm, /tensor.*\d+\.\d+/, `a number from the Debug Console: ${norm}`);
    const normValue = Number(await dbg.evaluate('grad_output[0].norm().item()'));
    assert.ok(Number.isFinite(normValue) && normValue > 0, `grad_output[0].norm().item() = ${normValue}`);
    await workbench.screenshot('debug-console-norm');

    await panel.show();
    await panel.waitForHeadline(/Paused in layer conv2 \(backward\)/);
    const row = await panel.waitForRow(/^grad_output\[0\]$/, (r) => r.histogramBars > 0);
    assert.match(row.cells.shape, /16.*32.*16.*16/, `grad_output[0] of conv2 is [16, 32, 16, 16]: ${row.cells.shape}`);
    const panelNorm = Number(row.cells.norm);
    assert.ok(Math.abs(panelNorm - normValue) <= 0.01 * normValue, `the panel's norm ${row.cells.norm} equals the console's ${normValue}`);
    assert.match(await panel.text('panel-paused-reason'), /conv2/);
    // For the README: a wide side bar with Variables, Call Stack and the Tensors panel in view.
    for (const view of ['Watch', 'Breakpoints', 'Layers', 'Layer Breakpoints']) await workbench.collapseView(view);
    await workbench.setSideBarWidth(760);
    await panel.waitForRow(/^grad_output\[0\]$/, (r) => r.histogramBars > 0);
    const shot = await workbench.screenshot('tensors-panel-conv2');
    // Tests never write tracked files: the README's screenshot is refreshed only on request.
    if (process.env.HOOKSCOPE_UPDATE_SCREENSHOTS === '1') fs.copyFileSync(shot, path.join(REPO_ROOT, 'docs', 'screenshot.png'));
  });

  it('3. continue, remove the breakpoint: the run finishes and no process is left', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const next = trace.mark();
    await dbg.continue(false); // the next stop can follow within a poll: wait on the trace
    // The breakpoint still holds: the next step's backward pass stops in conv2 again.
    const hit = await trace.waitForEvent('the next hit in conv2', isEvent('hit', { layer: 'conv2', pausing: true }), { after: next, timeoutMs: 60_000 });
    assert.ok((hit.step as number) >= 1, `a later step: ${hit.step}`);
    await trace.waitForEvent('the debugger stopped again', isEvent('dap.stopped'), { after: next, timeoutMs: 60_000 });
    await dbg.waitForPaused();

    await workbench.openFile('cnn.py');
    await workbench.goToLine(Workbench.lineOf(cnn(), 'self.conv2 = nn.Conv2d('));
    const removedAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled off', isEvent('breakpoint.toggled', { present: false }), { after: removedAt });
    await trace.waitForEvent('no breakpoints sent to the process', isEvent('breakpoints.sent', { count: 0 }), { after: removedAt });

    const resumedAt = trace.mark();
    await dbg.continue();
    await trace.waitForEvent('process exited', isEvent('process.exited'), { after: resumedAt, timeoutMs: 120_000 });
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: resumedAt, timeoutMs: 60_000 });
    assert.equal(trace.find(isEvent('hit'), resumedAt), undefined, 'no hit after the breakpoint was removed');
    await dbg.waitForSessionEnd();
    await dbg.openDebugConsole();
    await waitFor('the program to print its final loss', async () => (await dbg.replRows()).some((r) => /final loss \d/.test(r)), { timeoutMs: 30_000 });
    await workbench.waitForStatusBar('not connected', /Hookscope: not connected/);
    await workbench.screenshot('run-finished');
    const run = session.run();
    const python = findRunProcesses(run.codeServer!.marks()).filter((p) => p.cmdline.includes('cnn.py'));
    assert.deepEqual(python, [], 'the debugged program has exited');
  });
});
