// A value condition on every layer, set by name in the editor (issue 20's deferred path from the UI):
// paused at a line breakpoint, "Add Layer Breakpoint by Name…" previews the layers its text selects
// (every layer with `*`, a subtree, a class), then takes a condition and a phase. On a model the
// examples do not have (token mixers in a second file, nn.MultiheadAttention with
// need_weights=False, an nn.ModuleList), the run stops in the first layer whose output crosses
// the threshold — the attention whose projection was scaled at step 3 — at the line that calls it,
// and the stop reads step 3, the program's own step, though the breakpoint came mid-run.
import assert from 'node:assert/strict';
import * as path from 'node:path';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { isEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';
import { Workbench } from '../harness/workbench.ts';

const PARTS = `"""The parts of a small token mixer: a second file, as in a real project."""
import torch
from torch import nn


class Mixer(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.norm = nn.LayerNorm(width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        mixed, _ = self.attn(h, h, h, need_weights=False)  # @call.attn
        return self.norm(h + mixed)


class Tower(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mixers = nn.ModuleList([Mixer(width) for _ in range(2)])
        self.readout = nn.Linear(width, 4)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for mixer in self.mixers:
            h = mixer(h)
        return self.readout(h.mean(dim=1))
`;

// Every activation and gradient stays below 10 until step 3, when mixers.1.attn's output reaches ~7.5e3.
const TRAIN = `"""Trains the tower; at step 3 one attention's output projection is scaled by 1e4."""
import torch
from torch import nn

from parts import Tower


def main() -> None:
    torch.manual_seed(5)
    model = Tower()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    tokens, labels = torch.randint(0, 32, (8, 10)), torch.randint(0, 4, (8,))
    for step in range(6):
        if step == 3:
            with torch.no_grad():
                model.mixers[1].attn.out_proj.weight.mul_(1e4)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(tokens), labels)  # @forward
        loss.backward()  # @backward
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
`;

describe('a layer breakpoint by name: a value condition on every layer', function () {
  const session = sessionSteps(() => startHookscopeRun('named-breakpoints', {
    files: { 'lab/parts.py': PARTS, 'lab/train_lab.py': TRAIN },
    launches: { targets: [{ name: 'Lab', script: 'lab/train_lab.py' }] },
  }));
  const parts = () => path.join(session.run().workspaceDir, 'lab', 'parts.py');
  const train = () => path.join(session.run().workspaceDir, 'lab', 'train_lab.py');

  it('previews the layers, takes the condition, and stops in the first layer over the threshold', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    await workbench.openFile('lab/train_lab.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    // Paused after the first forward, the model is known: the input box can say what a name selects.
    const backwardLine = Workbench.lineOf(train(), '# @backward');
    await workbench.goToLine(backwardLine);
    await workbench.page.keyboard.press('F9');
    await dbg.start('Lab');
    await trace.waitForEvent('model found', isEvent('modelAdded', { cls: 'Tower' }), { timeoutMs: 120_000 });
    await dbg.waitForPaused();

    await workbench.runCommand('Hookscope: Add Layer Breakpoint by Name…');
    // Tower has 12 modules, the root included (named_modules(), as the backend's glob sees them).
    assert.match(await workbench.typeInInputBox('*', /^Matches 12 layers: \(the model\), embed, mixers, mixers\.0,/), /checked once per step/);
    await workbench.typeInInputBox('mixers.*.attn', /^Matches 2 layers: mixers\.0\.attn, mixers\.1\.attn\./);
    await workbench.typeInInputBox('MultiheadAttention', /^Matches 2 layers: mixers\.0\.attn, mixers\.1\.attn\./);
    await workbench.typeInInputBox('Conv2d', /^Matches no layer of the connected models yet/);
    await workbench.typeInInputBox('*', /^Matches 12 layers/);
    await workbench.screenshot('named-breakpoint-preview');
    await workbench.page.keyboard.press('Enter');
    await workbench.pickQuickPickItem('Abs-max above…');
    await workbench.answerInputBox('100');
    const named = trace.mark();
    await workbench.pickQuickPickItem('Forward and backward');
    await trace.waitForEvent('the breakpoint on every layer', isEvent('breakpoint.named', { layer: '*', cls: null }), { after: named });
    await trace.waitForEvent('sent to the process', (e) => e.event === 'breakpoints.sent' && JSON.stringify(e.specs).includes('"layer":"*"'), { after: named });
    // The Layer Breakpoints row names the glob, the condition and how many layers it matched.
    await workbench.expandView('Layer Breakpoints');
    await waitForRow(workbench, /^\*.*both.*\|x\|max > 100.*→ 12 layers/);

    // Remove the line breakpoint and run on: steps 0-2 stay under the threshold.
    await workbench.openFile('lab/train_lab.py');
    await workbench.goToLine(backwardLine);
    await workbench.page.keyboard.press('F9');
    const resumed = trace.mark();
    await dbg.continue();
    const hit = await trace.waitForEvent('hit in mixers.1.attn (forward, step 3)', isEvent('hit', { layer: 'mixers.1.attn', phase: 'forward', pausing: true }),
      { after: resumed, timeoutMs: 120_000 });
    // The program's own step 3, though the breakpoint came after step 0's forward (README, "Steps").
    assert.equal(hit.step, 3, JSON.stringify(hit));
    const absmax = Number(/abs-max (\S+) > 100/.exec(String(hit.reason))?.[1]);
    assert.ok(absmax > 1000, `the reason gives the value that crossed: ${String(hit.reason)}`);
    await dbg.waitForPaused();
    // The editor shows the line of Mixer.forward that called the layer, in the second file.
    await workbench.waitForActiveEditor('parts.py', Workbench.lineOf(parts(), '# @call.attn'));
    await dbg.waitForStackFrame(/mixers\.1\.attn · forward.*parts\.py/);
    // The training loop is below, at its forward call. VS Code asks for the top frame first and the
    // rest a moment later, showing the last stop's frames meanwhile: wait for this stop's line.
    const forwardLine = Workbench.lineOf(train(), '# @forward');
    await dbg.waitForStackFrame(new RegExp(`main\\s+train_lab\\.py ${forwardLine}:`));
    assert.match(await dbg.evaluate('layer'), /mixers\.1\.attn/);
    assert.equal(await dbg.evaluate('bool(output[0].abs().max() > 100)'), 'True');
    await workbench.screenshot('named-breakpoint-stop');

    const ended = trace.mark();
    await dbg.stop();
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: ended, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});

async function waitForRow(workbench: Workbench, pattern: RegExp): Promise<string> {
  return waitFor(`a Layer Breakpoints row matching ${pattern}`, async () =>
    (await workbench.treeRows('Layer Breakpoints')).find((r) => pattern.test(r.replace(/\s+/g, ' '))), { timeoutMs: 30_000 });
}
