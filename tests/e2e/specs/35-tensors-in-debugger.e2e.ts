// Issue 9 in a real VS Code: paused at a line breakpoint, the Variables view shows
// tensors as one summary line (not their repr), a tensor whose __repr__ takes
// seconds appears at once, and "Show Expression in Hookscope" on a 2-D tensor
// renders a slice whose pixels follow its values (left half 0, right half 1).
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { hookscopeVsix, sessionSteps } from '../harness/hookscope.ts';
import { EXAMPLES_DIR } from '../harness/paths.ts';
import { imageHalvesLuma } from '../harness/images.ts';
import { E2ERun } from '../harness/session.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent } from '../harness/trace.ts';
import { Workbench } from '../harness/workbench.ts';
import { hookscopeSettings, launchJson } from '../harness/workspace.ts';

const INSPECT_ME = `import time

import torch


class SlowRepr(torch.Tensor):
    """A tensor whose repr takes seconds (as a huge or remote tensor's can)."""

    def __repr__(self, *args, **kwargs):
        time.sleep(8)
        return "slow"


slow = torch.randn(64, 64).as_subclass(SlowRepr)
image = torch.zeros(16, 16)
image[:, 8:] = 1.0
weights = torch.randn(4096, 4096)
image  # @inspect
print("done")
`;

describe('tensors in the debugger views', function () {
  const session = sessionSteps(() => E2ERun.start({
    name: 'tensors-in-debugger',
    extensions: [hookscopeVsix()],
    workspaceSource: EXAMPLES_DIR,
    workspaceFiles: {
      '.vscode/launch.json': launchJson([{ name: 'Hookscope: inspect', script: 'inspect_me.py' }]),
      'inspect_me.py': INSPECT_ME,
    },
    settings: ({ traceFile }) => hookscopeSettings({ traceFile }),
  }));

  it('9. summary lines in Variables, a slow repr at once, and a slice that matches the values', async function () {
    const { workbench, trace, workspaceDir } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('inspect_me.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.goToLine(Workbench.lineOf(path.join(workspaceDir, 'inspect_me.py'), '# @inspect'));
    await workbench.page.keyboard.press('F9');
    await dbg.start('Hookscope: inspect');
    await dbg.waitForPaused({ timeoutMs: 120_000 });

    // The repr would take 8 s: the summary line must be there well before.
    const slow = await dbg.waitForVariable(/^slow\b/, { timeoutMs: 6_000 });
    assert.match(slow, /tensor\[64, 64\] f32 cpu/, `a summary line, not the repr: ${slow}`);
    const image = await dbg.waitForVariable(/^image\b/);
    assert.match(image, /tensor\[16, 16\] f32 cpu/);
    assert.doesNotMatch(image, /tensor\(\[\[/, 'not torch\'s repr');
    const weights = await dbg.waitForVariable(/^weights\b/);
    assert.match(weights, /tensor\[4096, 4096\] f32 cpu/);
    await workbench.screenshot('variables-summary-lines');

    // The cursor is on `image`: show it in the panel.
    const shownAt = trace.mark();
    await workbench.runCommand('Hookscope: Show Expression in Hookscope');
    const shown = await trace.waitForEvent('inspect shown', isEvent('inspect.shown'), { after: shownAt, timeoutMs: 30_000 });
    assert.deepEqual(shown.shape, [16, 16]);
    await trace.waitForEvent('inspect rendered', isEvent('inspect.render'), { after: shownAt, timeoutMs: 30_000 });
    const frame = await panel.show();
    const halves = await imageHalvesLuma(frame, '[data-testid=inspect-section] img');
    assert.ok(halves.width >= 16 && halves.height >= 16, JSON.stringify(halves));
    assert.ok(halves.right > halves.left + 60, `the 1.0 half is brighter than the 0.0 half: ${JSON.stringify(halves)}`);
    await workbench.screenshot('show-in-hookscope-slice');
    // Content scrolls under the sticky header: the header must hide it (it was transparent,
    // and a short panel showed the inspect text across the headline).
    const backgrounds = await frame.locator('[data-testid=panel-header]').evaluate((header) => ({
      header: getComputedStyle(header).backgroundColor,
      body: getComputedStyle(document.body).backgroundColor,
    }));
    assert.equal(backgrounds.header, backgrounds.body, JSON.stringify(backgrounds));
    assert.doesNotMatch(backgrounds.header, /^transparent$|rgba\(.*,\s*0\)$/, `an opaque header: ${backgrounds.header}`);

    const stoppedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
