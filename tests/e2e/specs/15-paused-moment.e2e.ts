// The paused moment belongs to the user (issue 18), on a model Hookscope's examples do not
// have: blocks with an nn.ModuleDict of branches in a second file, held in an nn.ModuleList,
// an nn.MultiheadAttention(need_weights=False), a readout module in the second file.
// (1) justMyCode off, a forward layer breakpoint on a definition line of the second file:
//     the editor shows the line of the parent's forward that calls the layer, the Call Stack's
//     top frame is "readout.score · forward", no Hookscope frame or source appears, and the
//     stop's locals evaluate in the Debug Console.
// (2) justMyCode on, a backward layer breakpoint on the attention: shown at the training
//     script's line that calls it, "attn · backward" above the user's frames.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { hookscopeFilePattern } from '../harness/hookscopeSources.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { isEvent } from '../harness/trace.ts';
import { Workbench } from '../harness/workbench.ts';

const BRANCHES = `"""Blocks and the readout of the tower: a second file, as in a real project."""
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.proj(h)) * h


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.branches = nn.ModuleDict({"mix": nn.Linear(width, width), "gate": Gate(width)})

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h + self.branches["mix"](self.norm(h))
        return h + self.branches["gate"](h)


class Readout(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.score = nn.Linear(width, 1)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        pooled = torch.tanh(h).mean(dim=1)
        return self.score(pooled).squeeze(-1)  # @call.score
`;

const TRAIN = `"""A small tower trained for a few steps."""
import torch
from torch import nn

from tower_parts import Block, Readout


class Tower(nn.Module):
    def __init__(self, width: int = 12) -> None:
        super().__init__()
        self.embed = nn.Linear(6, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(3)])
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.readout = Readout(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        mixed, _ = self.attn(h, h, h, need_weights=False)  # @call.attn
        return self.readout(mixed)


def main() -> None:
    torch.manual_seed(3)
    model = Tower()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(4, 5, 6), torch.randn(4)
    for step in range(4):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()  # @backward
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
`;

/** Files of the hookscope package a user must never meet at a stop. */
const HOOKSCOPE_FILES = hookscopeFilePattern(['tower_parts.py', 'train_tower.py']);

describe('the paused moment shows the user\'s code (a model the examples do not have)', function () {
  const session = sessionSteps(() => startHookscopeRun('paused-moment', {
    files: { 'tower/tower_parts.py': BRANCHES, 'tower/train_tower.py': TRAIN },
    launches: {
      targets: [
        { name: 'Tower (all code)', script: 'tower/train_tower.py', justMyCode: false },
        { name: 'Tower (my code)', script: 'tower/train_tower.py' },
      ],
    },
  }));
  const parts = () => path.join(session.run().workspaceDir, 'tower', 'tower_parts.py');
  const train = () => path.join(session.run().workspaceDir, 'tower', 'train_tower.py');

  /** The Call Stack's frames (rows naming a .py file), after the user's frames have loaded. */
  async function frames(dbg: Debugger): Promise<string[]> {
    const stack = await dbg.waitForStackFrame(/main.*train_tower\.py/);
    const rows = stack.filter((r) => /\.py/.test(r));
    assert.deepEqual(rows.filter((r) => HOOKSCOPE_FILES.test(r)), [], `no Hookscope frame in the Call Stack: ${stack.join(' | ')}`);
    return rows;
  }

  async function assertNoHookscopeSource(workbench: Workbench): Promise<void> {
    const tabs = (await workbench.editorTabs()).all;
    assert.deepEqual(tabs.filter((t) => HOOKSCOPE_FILES.test(t)), [], `no Hookscope source opened: ${tabs.join(', ')}`);
  }

  it('1. justMyCode off: a forward stop in the second file is shown at the line calling the layer', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('tower/tower_parts.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    const scoreLine = Workbench.lineOf(parts(), 'self.score = nn.Linear(');
    await workbench.goToLine(scoreLine);
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled on', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });

    const started = trace.mark();
    await dbg.start('Tower (all code)');
    await trace.waitForEvent('hit in readout.score (forward)', isEvent('hit', { layer: 'readout.score', phase: 'forward', pausing: true }),
      { after: started, timeoutMs: 120_000 });
    await dbg.waitForPaused();
    await workbench.waitForActiveEditor('tower_parts.py', Workbench.lineOf(parts(), '# @call.score'));
    await dbg.waitForScopeExpandedByItself('Locals'); // the stop's locals in sight with no click
    const rows = await frames(dbg);
    assert.match(rows[0] ?? '', /readout\.score · forward.*tower_parts\.py/, `the stop frame on top: ${rows.join(' | ')}`);
    // The parent's forward and the user's loop are the next frames of the user's code.
    assert.ok(rows.some((r) => /forward.*train_tower\.py/.test(r)), `Tower.forward is in the stack: ${rows.join(' | ')}`);
    assert.match(await dbg.waitForVariable(/^output\b/), /output/);
    assert.equal(await dbg.evaluate('tuple(output.shape)'), '(4, 1)');
    assert.match(await dbg.evaluate('layer'), /readout\.score/);
    await assertNoHookscopeSource(workbench);
    await workbench.screenshot('tower-forward-stop-all-code');

    await workbench.openFile('tower/tower_parts.py');
    await workbench.goToLine(scoreLine);
    const removedAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled off', isEvent('breakpoint.toggled', { present: false }), { after: removedAt });
    await trace.waitForEvent('no breakpoints sent to the process', isEvent('breakpoints.sent', { count: 0 }), { after: removedAt });
    const endedAt = trace.mark();
    await dbg.continue();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: endedAt, timeoutMs: 120_000 });
    await dbg.waitForSessionEnd();
  });

  it('2. justMyCode on: a backward stop is shown at the line that calls the layer', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('tower/train_tower.py');
    const attnLine = Workbench.lineOf(train(), 'self.attn = nn.MultiheadAttention(');
    await workbench.goToLine(attnLine);
    const toggledAt = trace.mark();
    await workbench.runCommand('Hookscope: Toggle Backward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled on', isEvent('breakpoint.toggled', { present: true }), { after: toggledAt });

    const started = trace.mark();
    await dbg.start('Tower (my code)');
    await trace.waitForEvent('hit in attn (backward)', isEvent('hit', { layer: 'attn', phase: 'backward', pausing: true }),
      { after: started, timeoutMs: 120_000 });
    await dbg.waitForPaused();
    await workbench.waitForActiveEditor('train_tower.py', Workbench.lineOf(train(), '# @call.attn'));
    const rows = await frames(dbg);
    assert.match(rows[0] ?? '', /attn · backward.*train_tower\.py/, `the stop frame on top: ${rows.join(' | ')}`);
    // justMyCode: below the stop, only the user's frames (the loop's backward line, main, the script).
    assert.ok(rows.slice(1).every((r) => /train_tower\.py/.test(r)), `only the user's frames below: ${rows.join(' | ')}`);
    assert.match(await dbg.waitForVariable(/^grad_output\b/), /grad_output/);
    assert.equal(await dbg.evaluate('tuple(grad_output[0].shape)'), '(4, 5, 12)');
    await assertNoHookscopeSource(workbench);
    await workbench.screenshot('tower-backward-stop-my-code');

    const endedAt = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: endedAt, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
