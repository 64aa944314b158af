// Issue 18 (points 3-6) in a real VS Code, on a model Hookscope has never seen (written here, not
// one of examples/): the Tensors panel is right, fresh and roomy.
// (1) attention of an nn.MultiheadAttention called with need_weights=False renders, captioned
//     with its layer, and the summary table fits a ~350 px side bar (norm and histogram kept);
// (2) at a backward stop the panel pictures grad_output and the layer's output of that step,
//     each captioned with the paused layer, the tensor and the step, drawn at the panel's width;
//     the same panel opens in the editor area beside the code and shows the same;
// (3) a second debug session shows no picture and no notice of the first: with Attention still
//     selected at a conv layer it shows the error alone, then the new stop's feature maps.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { hookscopeVsix, sessionSteps } from '../harness/hookscope.ts';
import { imageStats } from '../harness/images.ts';
import { EXAMPLES_DIR } from '../harness/paths.ts';
import { E2ERun } from '../harness/session.ts';
import { TensorsPanel, type PanelFigure } from '../harness/tensorsPanel.ts';
import { isEvent, type TraceEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';
import { hookscopeSettings, launchJson } from '../harness/workspace.ts';

const SCRIPT = 'pixel_attention.py';
const PIXEL_ATTENTION = `"""Attention over the pixels of a small conv net's feature map (a model of this spec only)."""
import torch
from torch import nn


class PixelAttention(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.mix = nn.Conv2d(channels, channels, 3, padding=1)
        self.attend = nn.MultiheadAttention(channels, 2, batch_first=True)
        self.head = nn.Linear(channels, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.stem(x))
        h = self.mix(h)
        tokens = h.flatten(2).transpose(1, 2)
        attended, _ = self.attend(tokens, tokens, tokens, need_weights=False)
        return self.head(attended.mean(1))


def main() -> None:
    torch.manual_seed(0)
    model = PixelAttention(8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(200):
        x = torch.randn(4, 3, 12, 12)
        y = torch.randint(0, 4, (4,))
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print("done")


if __name__ == "__main__":
    main()
`;
const LAUNCH = 'Hookscope: pixel attention';
const SIDE_BAR = 350;

/** Drawn at the width the panel gives it (within a few pixels), whatever its natural size; in a
 * side bar one picture takes the panel's whole width, in the wide editor view pictures may sit side by side. */
function assertFillsWidth(f: PanelFigure, where: 'side bar' | 'editor'): void {
  assert.ok(Math.abs(f.drawnWidth - f.figureWidth) <= 4, `${where}: ${f.caption} drawn ${f.drawnWidth}px wide in its ${f.figureWidth}px figure (natural ${f.naturalWidth}px)`);
  assert.ok(f.figureWidth <= f.boxWidth + 1, `${where}: ${f.caption} is not wider than the panel: ${f.figureWidth} of ${f.boxWidth}px`);
  const share = where === 'side bar' ? 1 : 0.45;
  assert.ok(f.figureWidth >= share * f.boxWidth - 4, `${where}: the figure takes the panel's width: ${f.figureWidth} of ${f.boxWidth}px`);
}

describe('the Tensors panel is right, fresh and roomy', function () {
  const session = sessionSteps(() => E2ERun.start({
    name: 'panel-fresh',
    extensions: [hookscopeVsix()],
    workspaceSource: EXAMPLES_DIR,
    workspaceFiles: { '.vscode/launch.json': launchJson([{ name: LAUNCH, script: SCRIPT }]), [SCRIPT]: PIXEL_ATTENTION },
    settings: ({ traceFile }) => hookscopeSettings({ traceFile }),
  }));
  const script = () => path.join(session.run().workspaceDir, SCRIPT);
  let firstPid: number;

  async function toggle(line: string, command: string, present: boolean): Promise<void> {
    const { workbench, trace } = session.run();
    const at = trace.mark();
    await workbench.openFile(SCRIPT);
    await workbench.goToLine(Workbench.lineOf(script(), line));
    await workbench.runCommand(command);
    await trace.waitForEvent(`${command} on ${line.trim()}`, isEvent('breakpoint.toggled', { present }), { after: at });
  }

  /** Starts the launch and waits for its first pausing hit. */
  async function startAndPause(): Promise<TraceEvent> {
    const { workbench, trace } = session.run();
    const started = trace.mark();
    await new Debugger(workbench).start(LAUNCH);
    const hit = await trace.waitForEvent('the first pausing hit', isEvent('hit', { pausing: true }), { after: started, timeoutMs: 120_000 });
    await new Debugger(workbench).waitForPaused();
    return hit;
  }

  it('1. need_weights=False attention renders with its caption; the table fits a 350 px side bar', async function () {
    const { workbench } = session.run();
    const panel = new TensorsPanel(workbench);
    await toggle('self.mix = nn.Conv2d(', 'Hookscope: Toggle Backward Layer Breakpoint', true);
    await toggle('self.attend = nn.MultiheadAttention(', 'Hookscope: Toggle Forward Layer Breakpoint', true);
    const hit = await startAndPause();
    assert.equal(hit.layer, 'attend', 'the forward of attend comes before any backward');
    assert.equal(hit.phase, 'forward');
    firstPid = hit.pid as number;

    await panel.show();
    for (const view of ['Variables', 'Watch', 'Call Stack', 'Breakpoints', 'Layers', 'Layer Breakpoints']) await workbench.collapseView(view);
    await workbench.setSideBarWidth(SIDE_BAR);
    await panel.waitForHeadline(/Paused in layer attend \(forward\)/);
    await panel.selectVisual('attention');
    const [attention] = await panel.waitForFigures('the attention map of attend', (fs) => fs[0].tensor === 'attention weights');
    assert.equal(attention.caption, `attend · attention weights · step ${hit.step}`);
    assert.match(attention.description, /average of 2 heads · 144 queries × 144 keys/);
    assert.match(attention.description, /need_weights=False/, 'it says the weights were recomputed');
    const frame = await panel.getFrame();
    const pixels = await imageStats(frame, '[data-testid=render-image]');
    assert.ok(pixels.distinctColors > 8, `the attention map is not blank: ${pixels.distinctColors} colours`);
    assertFillsWidth(attention, 'side bar');

    await panel.waitForRow(/^output\[0\]$/, (r) => r.histogramBars > 0);
    const fit = await panel.tableFit();
    assert.ok(fit.rows >= 2, `rows shown: ${fit.rows}`);
    assert.ok(fit.scrollWidth <= fit.clientWidth + 1, `no horizontal overflow at ${SIDE_BAR}px: ${JSON.stringify(fit)}`);
    assert.ok(fit.normInside && fit.histInside, `norm and histogram stay in view: ${JSON.stringify(fit)}`);
    assert.ok(fit.clientWidth < 400, `the side bar is narrow here: ${fit.clientWidth}px`);
    await workbench.screenshot('panel-attention-side-bar');
  });

  it('2. at a backward stop: grad_output and the output of the same step, at the panel width, also in the editor', async function () {
    const { workbench, trace } = session.run();
    const panel = new TensorsPanel(workbench);
    const at = trace.mark();
    await new Debugger(workbench).continue(false);
    const hit = await trace.waitForEvent('the backward stop in mix', isEvent('hit', { layer: 'mix', phase: 'backward', pausing: true }), { after: at, timeoutMs: 60_000 });
    await new Debugger(workbench).waitForPaused();
    await panel.waitForHeadline(/Paused in layer mix \(backward\)/);
    await panel.selectVisual('featureMap');
    const figures = await panel.waitForFigures('the gradient and the output of mix', (fs) => fs.length === 2 && fs[0].layer === 'mix');
    assert.deepEqual(figures.map((f) => [f.layer, f.tensor, f.step, f.phase]),
      [['mix', 'grad_output[0]', hit.step, 'backward'], ['mix', 'output', hit.step, 'forward']]);
    assert.deepEqual(figures.map((f) => f.caption), [`mix · grad_output[0] · step ${hit.step}`, `mix · output · step ${hit.step}`]);
    assert.match(figures[0].description, /\[4, 8, 12, 12\]: 8 channels/);
    for (const f of figures) {
      assertFillsWidth(f, 'side bar');
      assert.ok(f.naturalWidth < f.drawnWidth / 2, `a small grid (${f.naturalWidth}px) is scaled up to the panel, not shown tiny`);
    }
    assert.equal(await panel.text('render-error'), '');
    assert.doesNotMatch(await panel.text('panel-detail'), /Layer breakpoint/, 'the reason is said once, in its own line');
    await workbench.screenshot('panel-backward-stop-side-bar');

    await workbench.runCommand('Hookscope: Open Tensors Panel in Editor');
    const wide = new TensorsPanel(workbench, 'editor');
    await wide.waitForHeadline(/Paused in layer mix \(backward\)/);
    await wide.selectVisual('featureMap');
    const inEditor = await wide.waitForFigures('the same pictures in the editor', (fs) => fs.length === 2);
    assert.deepEqual(inEditor.map((f) => f.caption), figures.map((f) => f.caption));
    for (const f of inEditor) assertFillsWidth(f, 'editor');
    assert.ok(inEditor[0].drawnWidth > figures[0].drawnWidth + 100, `wider in the editor: ${inEditor[0].drawnWidth} vs ${figures[0].drawnWidth}`);
    await workbench.screenshot('panel-backward-stop-editor');
  });

  it('3. a second session shows nothing of the first: no picture, no notice; a reason never beside an image', async function () {
    const { workbench, trace } = session.run();
    const panel = new TensorsPanel(workbench);
    const wide = new TensorsPanel(workbench, 'editor');
    const stoppedAt = trace.mark();
    await new Debugger(workbench).stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: stoppedAt, timeoutMs: 60_000 });
    await panel.waitForHeadline(/Not connected/);
    for (const p of [panel, wide]) {
      await waitFor(`no picture left in the ${p.host} panel`, async () => (await p.figures()).length === 0, { timeoutMs: 30_000 });
    }

    // Next session: only the backward breakpoint, and Attention still selected (a conv has none).
    await toggle('self.attend = nn.MultiheadAttention(', 'Hookscope: Toggle Forward Layer Breakpoint', false);
    await panel.selectVisual('attention');
    const hit = await startAndPause();
    assert.equal(hit.layer, 'mix');
    assert.notEqual(hit.pid, firstPid, 'a new process');
    await panel.waitForHeadline(/Paused in layer mix \(backward\)/);
    // Why there is no attention map here, and no picture beside it (least of all the first session's).
    const why = await waitFor('why mix has no attention map', async () => {
      const said = [...await panel.notes(), await panel.text('render-error')].filter(Boolean);
      return said.length ? said : undefined;
    }, { timeoutMs: 60_000 });
    assert.match(why.join(' '), /mix returned no attention weights/);
    assert.equal((await panel.figures()).length, 0, 'the reason, and no image beside it');
    const notices = await panel.notices();
    assert.ok(!notices.some((n) => n.includes(String(firstPid))), `no notice of the first session's pid ${firstPid}: ${JSON.stringify(notices)}`);
    await workbench.screenshot('panel-second-session-attention-error');

    await panel.selectVisual('featureMap');
    const figures = await panel.waitForFigures('the new stop\'s pictures', (fs) => fs.length === 2);
    for (const f of figures) {
      assert.equal(f.layer, 'mix');
      assert.equal(f.step, hit.step, `${f.caption} is of this stop's step`);
    }
    const inEditor = await wide.waitForFigures('the editor panel in step with the side bar', (fs) => fs.length === 2 && fs[0].step === hit.step);
    assert.equal(inEditor[0].caption, figures[0].caption);
    await workbench.screenshot('panel-second-session');

    const endedAt = trace.mark();
    await new Debugger(workbench).stop();
    await trace.waitForEvent('second session ended', isEvent('session.ended'), { after: endedAt, timeoutMs: 60_000 });
  });
});
