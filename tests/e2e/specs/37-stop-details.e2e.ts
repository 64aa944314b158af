// The details of a stop (issue 18, points 2 and 7), on a model the examples do not have: blocks
// with an nn.ModuleDict of branches in a second file, called through a local name
// (`b = self.branches; b["mix"](h)`), held in an nn.ModuleList; a conditional definition.
// (1) A backward layer breakpoint on a definition line that makes 3 layers (one per block) asks
//     which one to stop in ("All 3 layers" / each layer); the choice is the only layer that stops,
//     the Layer Breakpoints row shows it, and at the stop the Variables view and the Debug Console
//     show `grad_output` (a tuple of tensors) as its one-line summary, not the tensor's text.
// (2) Break on NaN/Inf: at the stop the Tensors panel says when it stops again after Continue;
//     the hit's step is the script's own `for step in range(...)` step; after Continue, once the
//     optimizer spread the NaN into the weights, the panel's notices say it is quiet and why.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent, type TraceEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

const PARTS = `"""The blocks of the stack, in their own file as in a real project."""
import torch
from torch import nn


class Damp(nn.Module):
    """Halves its input; once planted, its backward makes NaN (sqrt'(0) = inf times 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.planted = False

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.planted:
            return torch.sqrt(h * 0.0) + h * 0.5
        return h * 0.5


class Gate(nn.Module):
    def __init__(self, width: int, damp: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.damp = Damp() if damp else nn.Identity()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.damp(torch.sigmoid(self.proj(h)) * h)


class Block(nn.Module):
    def __init__(self, width: int, damp: bool) -> None:
        super().__init__()
        self.branches = nn.ModuleDict({
            "mix": nn.Linear(width, width),
            "gate": Gate(width, damp),
        })

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b = self.branches
        h = h + b["mix"](h)
        return h + b["gate"](h)
`;

const TRAIN = `"""A stack of three blocks trained step by step; --nan-at N plants a NaN in blocks.1's backward."""
import argparse

import torch
from torch import nn

from stack_parts import Block


class Stack(nn.Module):
    def __init__(self, width: int = 12) -> None:
        super().__init__()
        self.embed = nn.Linear(6, width)
        self.blocks = nn.ModuleList([Block(width, damp=True) for _ in range(3)])
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h).mean(dim=(1, 2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--nan-at", type=int, default=-1)
    args = parser.parse_args()
    torch.manual_seed(5)
    model = Stack()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(4, 5, 6), torch.randn(4)
    for step in range(args.steps):
        if step == args.nan_at:
            model.blocks[1].branches["gate"].damp.planted = True
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
`;

const MIX = ['blocks.0.branches.mix', 'blocks.1.branches.mix', 'blocks.2.branches.mix'];

describe('the details of a stop (a model the examples do not have)', function () {
  const session = sessionSteps(() => startHookscopeRun('stop-details', {
    files: { 'stack/stack_parts.py': PARTS, 'stack/train_stack.py': TRAIN },
    launches: {
      targets: [
        { name: 'Stack', script: 'stack/train_stack.py', args: ['--steps', '100000'] },
        { name: 'Stack (NaN)', script: 'stack/train_stack.py', args: ['--steps', '100000', '--nan-at', '2'] },
      ],
    },
  }));
  const parts = () => path.join(session.run().workspaceDir, 'stack', 'stack_parts.py');

  /** Rows of the Quick Pick that is open now. */
  async function quickPickLabels(workbench: Workbench): Promise<string[]> {
    return workbench.page.locator('.quick-input-widget .monaco-list-row .label-name').allInnerTexts();
  }

  it('1. a line that makes 3 layers asks which one; only that one stops, and grad_output reads as one line', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('stack/stack_parts.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    const mixLine = Workbench.lineOf(parts(), '"mix": nn.Linear(width, width),');
    await workbench.goToLine(mixLine);
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    const toggled = await trace.waitForEvent('breakpoint toggled on', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });

    const started = trace.mark();
    await dbg.start('Stack');
    // Once the process resolved the line to the three blocks' mix layers, the question comes.
    const asked = await trace.waitForEvent('the instance question', isEvent('breakpoint.instanceAsked', { id: toggled.id }),
      { after: started, timeoutMs: 120_000 });
    assert.deepEqual(asked.layers, MIX);
    const labels = await waitFor('the instance Quick Pick', async () => {
      const rows = await quickPickLabels(workbench);
      return rows.includes('All 3 layers') ? rows : false;
    }, { timeoutMs: 30_000 });
    assert.deepEqual(labels, ['All 3 layers', ...MIX]);
    await workbench.screenshot('instance-quick-pick');
    const chosenAt = trace.mark();
    await workbench.pickQuickPickItem(MIX[1]);
    await trace.waitForEvent('the choice', isEvent('breakpoint.instanceChosen', { id: toggled.id, instance: MIX[1] }), { after: chosenAt });
    const resolved = await trace.waitForEvent('the breakpoint resolved to the chosen layer alone',
      (e) => e.event === 'breakpoints.resolved' && resolvedTo(e, toggled.id as string, [MIX[1]]),
      { after: chosenAt, timeoutMs: 60_000 });
    const fromChoice = trace.read().indexOf(resolved);

    // A stop may have come before the answer (blocks.2's backward runs first): go on from it.
    // From the resolution on, only blocks.1's mix stops.
    const stopAfterChoice = () => trace.read().slice(fromChoice).find((e) => e.event === 'hit' && e.pausing === true);
    const hit = await waitFor('a stop after the choice', async () => {
      const found = stopAfterChoice();
      if (found) return found;
      // The hit is traced before the process pauses: paused with no such hit is an earlier stop.
      if ((await dbg.isPaused()) && !stopAfterChoice()) await dbg.continue();
      return false;
    }, { timeoutMs: 120_000 });
    assert.deepEqual([hit.layer, hit.phase], [MIX[1], 'backward'], JSON.stringify(hit));
    await dbg.waitForPaused();

    // The Variables view and the Debug Console: grad_output is a tuple of one tensor, shown as its summary.
    const line = String.raw`\(tensor\[4, 5, 12\] f32 cpu μ=\S+ σ=\S+ \[\S+, \S+\],\)`;
    const summary = new RegExp(`^${line}$`);
    const variable = await dbg.waitForVariable(/^grad_output\b/); // "grad_output = <value> grad_output, value <value>"
    assert.match(variable, new RegExp(`^grad_output = ${line}( |$)`), `Variables: ${variable}`);
    assert.doesNotMatch(variable, /tensor\(\[/, 'no tensor text');
    assert.match(await dbg.evaluate('grad_output'), summary);
    assert.match(await dbg.evaluate('[grad_output[0], None]'), /^\[tensor\[4, 5, 12\] f32 cpu μ=\S+ σ=\S+ \[\S+, \S+\], None\]$/);

    // The Layer Breakpoints row shows the choice.
    await workbench.expandView('Layer Breakpoints');
    const row = await waitFor('the Layer Breakpoints row with the chosen instance', async () =>
      (await workbench.treeRows('Layer Breakpoints')).find((r) => r.includes(`stack_parts.py:${mixLine}`) && r.includes(`only ${MIX[1]}`)),
    { timeoutMs: 20_000 });
    assert.match(row, /backward/);
    await workbench.screenshot('stop-in-the-chosen-instance');

    // Continue: the next stop is blocks.1's again (the next step), never another block's.
    const continuedAt = trace.mark();
    await dbg.continue();
    const next = await trace.waitForEvent('the next stop', isEvent('hit', { pausing: true }), { after: continuedAt, timeoutMs: 120_000 });
    assert.deepEqual([next.layer, next.step], [MIX[1], (hit.step as number) + 1], JSON.stringify(next));
    const stops = trace.read().slice(fromChoice).filter((e) => e.event === 'hit');
    assert.deepEqual([...new Set(stops.map((e) => e.layer))], [MIX[1]], 'only the chosen instance stops');
    await dbg.waitForPaused();

    // The breakpoint goes; the run ends.
    await workbench.openFile('stack/stack_parts.py');
    await workbench.goToLine(mixLine);
    const removedAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled off', isEvent('breakpoint.toggled', { present: false }), { after: removedAt });
    const endedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: endedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });

  it('2. at a NaN stop the panel says when break on NaN stops again, and after Continue that it is quiet', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.runCommand('Hookscope: Toggle Break on NaN/Inf');
    await trace.waitForEvent('break on NaN/Inf on', isEvent('breakOnNonFinite', { enabled: true }));

    const started = trace.mark();
    await dbg.start('Stack (NaN)');
    const hit = await trace.waitForEvent('the NaN stop', isEvent('hit', { breakpoint: 'nonfinite', pausing: true }),
      { after: started, timeoutMs: 120_000 });
    assert.deepEqual([hit.layer, hit.phase], ['blocks.1.branches.gate.damp', 'backward'], JSON.stringify(hit));
    assert.equal(hit.step, 2, 'the step is the script\'s own (planted at step 2 of `for step in range`)');
    await dbg.waitForPaused();

    for (const view of ['Variables', 'Watch', 'Call Stack', 'Breakpoints', 'Layers', 'Layer Breakpoints']) await workbench.collapseView(view);
    await panel.show();
    await panel.waitForHeadline(/blocks\.1\.branches\.gate\.damp/);
    const rearm = await waitFor('the re-arm line', async () => {
      const text = await panel.text('panel-rearm');
      return text || false;
    }, { timeoutMs: 30_000 });
    assert.match(rearm, /^After Continue: Break on NaN\/Inf stops again at the next step with a new NaN\/Inf/);
    const frame = await panel.getFrame();
    assert.match(await panel.text('panel-detail'), /step 2\b/);
    assert.match(await frame.locator('[data-testid=panel-detail]').getAttribute('title') ?? '', /counted from 0/);
    await workbench.screenshot('nan-stop-rearm-line');

    // Continue: the optimizer put the NaN into the weights, so every later step is bad: quiet, and it says so.
    const continuedAt = trace.mark();
    await dbg.continue();
    const notice = await trace.waitForEvent('the quiet notice', isEvent('notice', { code: 'nonfiniteQuiet' }),
      { after: continuedAt, timeoutMs: 120_000 });
    assert.match(String(notice.message), /quiet on model .* from step 3: .*hold NaN\/Inf now.*after a step runs clean/);
    const shown = await waitFor('the quiet notice in the panel', async () => {
      const notices = await (await panel.getFrame()).locator('[data-testid=notice]').allInnerTexts();
      return notices.find((n) => /Break on NaN\/Inf is quiet/.test(n)) ?? false;
    }, { timeoutMs: 30_000 });
    assert.match(shown, /from step 3/);
    assert.equal(trace.read().slice(continuedAt).filter((e) => e.event === 'hit').length, 0, 'no stop while quiet');
    await workbench.screenshot('nan-quiet-notice');

    const endedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: endedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});

/** Whether a `breakpoints.resolved` trace event resolved breakpoint `id` to exactly `layers`. */
function resolvedTo(event: TraceEvent, id: string, layers: string[]): boolean {
  const resolved = event.resolved as { id: string; layers: string[] }[] | undefined;
  const entry = resolved?.find((r) => r.id === id);
  return !!entry && JSON.stringify(entry.layers) === JSON.stringify(layers);
}
