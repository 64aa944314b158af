// Self-test of the e2e machinery with a throwaway probe extension (no Hookscope
// needed): install a .vsix, activation seen in the trace file, a command run
// from the palette, a webview read through its nested frames (text and an
// image's natural size and pixels), screenshots, and a teardown that leaves no
// process behind.
import assert from 'node:assert/strict';
import { EXAMPLES_DIR } from '../harness/paths.ts';
import { packFixtureExtension } from '../harness/probe.ts';
import { findRunProcesses } from '../harness/processes.ts';
import { E2ERun } from '../harness/session.ts';
import { isEvent } from '../harness/trace.ts';
import { imageStats } from '../harness/images.ts';

describe('e2e harness (probe extension)', function () {
  let run: E2ERun | undefined;

  afterEach(async function () {
    await run?.stop(this.currentTest?.state === 'failed');
    run = undefined;
  });

  it('installs a vsix, runs a palette command, reads a webview and tears down cleanly', async function () {
    const vsix = packFixtureExtension('probe-extension');
    run = await E2ERun.start({
      name: 'harness-probe',
      extensions: [vsix],
      workspaceSource: EXAMPLES_DIR,
      settings: ({ traceFile }) => ({ 'e2eProbe.traceFile': traceFile }),
    });
    const { workbench, trace } = run;
    await trace.waitForEvent('probe activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.screenshot('workbench-open');

    await workbench.openFile('cnn.py');
    await workbench.goToLine(18);
    assert.equal(await workbench.cursorLine(), 18);
    await workbench.screenshot('cnn-line-18');

    await workbench.runCommand('E2E Probe: Show Panel');
    await trace.waitForEvent('panel shown', isEvent('panelShown'));
    const frame = await workbench.webviewFrame('[data-testid=probe-status]');
    await frame.locator('[data-testid=probe-status]', { hasText: 'connected to host' }).waitFor({ timeout: 30_000 });
    await trace.waitForEvent('webview round trip', (e) => e.event === 'webview' && (e.message as { type?: string })?.type === 'rendered');
    const image = await imageStats(frame, '[data-testid=probe-image]');
    assert.deepEqual([image.naturalWidth, image.naturalHeight], [64, 48]);
    assert.ok(image.distinctColors > 10, `image looks blank: ${JSON.stringify(image)}`);
    await workbench.screenshot('probe-panel');

    const marks = run.codeServer!.marks();
    assert.ok(findRunProcesses(marks).length > 0, 'the run should have live processes before teardown');
    await run.stop();
    run = undefined;
    assert.deepEqual(findRunProcesses(marks), [], 'no process of the run may survive teardown');
  });
});
