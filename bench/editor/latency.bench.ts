// What the user feels, measured through the real extension in code-server (the e2e harness):
// (a) hook → Tensors panel: a layer's forward hook fires in the debuggee → its summary row is
//     drawn in the panel's webview, and → an image of that step is drawn (images refresh at most
//     once a second while running, by design: that wait is part of what is measured);
// (b) stop → Variables: a layer breakpoint's hit reaches the extension → the Variables view shows
//     the layer's `output` row.
// Every timestamp is the machine's wall clock in ms (Python's time.time(), Node's and Chromium's
// Date.now(), all on this machine), taken where the thing happens: the debuggee's own pre-hook on
// the layer, a MutationObserver inside the webview / the workbench page (the DOM change; the paint
// follows within a frame), the extension's trace line for the hit. Writes a Markdown section to
// $HOOKSCOPE_BENCH_OUT (bench/run.py puts it into bench/RESULTS.md). Run: `make bench-editor`.
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Frame, Page } from 'playwright-core';
import { Debugger } from '../../tests/e2e/harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../../tests/e2e/harness/hookscope.ts';
import { TensorsPanel } from '../../tests/e2e/harness/tensorsPanel.ts';
import { isEvent } from '../../tests/e2e/harness/trace.ts';
import { waitFor } from '../../tests/e2e/harness/wait.ts';
import { Workbench } from '../../tests/e2e/harness/workbench.ts';
import { EXAMPLE_LAUNCHES } from '../../tests/e2e/harness/workspace.ts';

const SCRIPT = 'latency_probe.py';
const LAUNCH = 'Hookscope: latency probe';
const STOPS = 30;
const LIVE_SECONDS = 40;

// The probe layer is an identity Linear fed the step number: its output's mean, shown in the
// panel's table, says which step a row is of; the script's own pre-hook logs when each step's
// probe forward began (the moment Hookscope's forward hook is about to run).
const PROBE_PY = `"""Editor-latency bench: the probe's output mean is the step; each probe forward's start is logged."""
import os
import time

import torch
from torch import nn


class ProbeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.probe = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)
        with torch.no_grad():
            self.probe.weight.copy_(torch.eye(8))
            self.probe.bias.zero_()

    def forward(self, x: torch.Tensor, step: int) -> torch.Tensor:
        h = self.stem(x).mean((2, 3)) * 0.0 + float(step)
        return self.head(self.probe(h))


log = open(os.environ["PROBE_LOG"], "a", buffering=1)
model = ProbeNet()
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
step = 0


def log_step(module: nn.Module, args: tuple) -> None:
    log.write(f"{step} {time.time() * 1000:.3f}\\n")


model.probe.register_forward_pre_hook(log_step)
stop_file = os.environ["PROBE_STOP"]
while step < 9999 and not os.path.exists(stop_file):
    loss = model(torch.randn(4, 1, 8, 8), step).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    time.sleep(0.02)
`;

/** When the observed texts changed, and what each named part read then. */
interface Sample { t: number; parts: Record<string, string> }

function percentile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
}

function row(what: string, values: number[]): string {
  const f = (x: number) => x.toFixed(0);
  return `| ${what} | ${values.length} | ${f(percentile(values, 0.5))} | ${f(percentile(values, 0.95))} | ${f(Math.max(...values))} |`;
}

/** Records, inside `frame` (a webview or the workbench page), every change of the texts of the
 * elements each named selector in `parts` matches — only inside the view pane titled `pane` when
 * given: `window.__hsSamples` gets {t, parts: {name: the matches' texts joined by ' | '}}, all
 * parts read in the same observer callback (so parts drawn by one message are seen together). */
async function observe(frame: Frame | Page, parts: Record<string, string>, pane?: string): Promise<void> {
  // A source string, not a function: the TypeScript loader would name the inner functions with a
  // helper that does not exist in the page.
  await frame.evaluate(`(() => {
    const parts = ${JSON.stringify(parts)}, paneTitle = ${JSON.stringify(pane ?? '')};
    window.__hsSamples = [];
    window.__hsLast = '';
    function root() {
      if (!paneTitle) return document;
      return [...document.querySelectorAll('.pane')].find((p) =>
        ((p.querySelector('.pane-header') || {}).innerText || '').trim().toLowerCase().startsWith(paneTitle.toLowerCase()));
    }
    function record() {
      const r = root();
      const read = {};
      for (const [name, sel] of Object.entries(parts)) {
        read[name] = r ? [...r.querySelectorAll(sel)].map((e) => e.innerText.trim()).join(' | ') : '';
      }
      const text = JSON.stringify(read);
      if (Object.values(read).some(Boolean) && text !== window.__hsLast) window.__hsSamples.push({ t: Date.now(), parts: read });
      window.__hsLast = text;
    }
    new MutationObserver(record).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  })()`);
}

async function samples(frame: Frame | Page): Promise<Sample[]> {
  return frame.evaluate('window.__hsSamples') as Promise<Sample[]>;
}

describe('editor latency (bench)', function () {
  const logFile = () => path.join(session.run().workspaceDir, 'probe-hooks.log');
  const stopFile = () => path.join(session.run().workspaceDir, 'probe-stop');
  const session = sessionSteps(() => startHookscopeRun('editor-latency', {
    files: { [SCRIPT]: PROBE_PY },
    launches: { targets: [...EXAMPLE_LAUNCHES, { name: LAUNCH, script: SCRIPT }] },
  }));
  const results: string[] = [];

  it(`stop → Variables filled, ${STOPS} stops; then hook → panel while running`, async function () {
    this.timeout(900_000);
    const { workbench, trace, workspaceDir } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    // the launch reads its environment from launch.json: add the log and stop files
    const launchPath = path.join(workspaceDir, '.vscode', 'launch.json');
    const launch = JSON.parse(fs.readFileSync(launchPath, 'utf8').replace(/^\s*\/\/.*$/gm, ''));
    for (const c of launch.configurations) if (c.name === LAUNCH) c.env = { PROBE_LOG: logFile(), PROBE_STOP: stopFile() };
    fs.writeFileSync(launchPath, JSON.stringify(launch, null, 2));

    await workbench.openFile(SCRIPT);
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    const at = trace.mark();
    await workbench.goToLine(Workbench.lineOf(path.join(workspaceDir, SCRIPT), 'self.probe = nn.Linear('));
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('breakpoint toggled', isEvent('breakpoint.toggled', { present: true }), { after: at });

    // (b) stop → Variables: each Continue runs to the next step's probe forward
    let mark = trace.mark();
    await dbg.start(LAUNCH);
    await trace.waitForEvent('the first stop', isEvent('hit', { layer: 'probe', pausing: true }), { after: mark, timeoutMs: 120_000 });
    await dbg.waitForPaused();
    await dbg.waitForVariable(/^output\b/);
    await observe(workbench.page, { rows: '.monaco-list-row' }, 'Variables');
    const stopLatencies: number[] = [];
    // where a stop's time goes, from the extension's trace of the DAP traffic (dap.request/dap.reply)
    const toScopes: number[] = []; // hit → the workbench asks for the frame's scopes
    const adapter: number[] = []; // that request → the last `variables` reply before the row was drawn
    const toDom: number[] = []; // that reply → the row in the DOM
    for (let i = 0; i < STOPS; i++) {
      mark = trace.mark();
      await dbg.continue(false);
      const hit = await trace.waitForEvent(`stop ${i + 1}`, isEvent('hit', { layer: 'probe', pausing: true }), { after: mark, timeoutMs: 60_000 });
      const hitAt = Number(hit.t);
      const shown = await waitFor(`the Variables view to show output after stop ${i + 1}`, async () =>
        (await samples(workbench.page)).find((s) => s.t >= hitAt && /(^|\| )output\b/.test(s.parts.rows)), { timeoutMs: 30_000 });
      stopLatencies.push(shown.t - hitAt);
      const traffic = trace.read().slice(mark).filter((e) => Number(e.t) >= hitAt && Number(e.t) <= shown.t);
      const scopes = traffic.find(isEvent('dap.request', { command: 'scopes' }));
      const reply = traffic.filter(isEvent('dap.reply', { command: 'variables' })).pop();
      if (scopes && reply) {
        toScopes.push(Number(scopes.t) - hitAt);
        adapter.push(Number(reply.t) - Number(scopes.t));
        toDom.push(shown.t - Number(reply.t));
      }
    }
    results.push(row('stop → Variables view shows the layer\'s `output` (hit at the extension → row in the DOM)', stopLatencies));
    results.push(row('… hit → the workbench requests the frame\'s `scopes` (VS Code: the call stack, then its Variables view waits 400 ms after a stop, against flashing)', toScopes));
    results.push(row('… `scopes` request → the `variables` reply (debugpy and Hookscope\'s values of the frame\'s tensors)', adapter));
    results.push(row('… `variables` reply → the row in the DOM (the workbench draws it)', toDom));

    // (a) hook → panel while running: the panel stays on probe after its breakpoint goes
    await panel.show();
    const frame = await panel.getFrame();
    mark = trace.mark();
    await workbench.goToLine(Workbench.lineOf(path.join(workspaceDir, SCRIPT), 'self.probe = nn.Linear('));
    await workbench.runCommand('Hookscope: Toggle Forward Layer Breakpoint');
    await trace.waitForEvent('breakpoint removed', isEvent('breakpoint.toggled', { present: false }), { after: mark });
    await panel.selectVisual('featureMap');
    // the table's mean (the script's step), the panel's "step N · process" line (Hookscope's step of
    // the same summaries message) and the image's caption (Hookscope's step of the image)
    await observe(frame, {
      mean: '[data-testid=tensor-row][data-path="output"] td[data-col=mean]',
      detail: '[data-testid=panel-detail]',
      caption: '[data-testid=render-caption]',
    });
    await dbg.continue(true);
    const until = Date.now() + LIVE_SECONDS * 1000;
    await waitFor('the live period', async () => Date.now() > until, { timeoutMs: LIVE_SECONDS * 1000 + 30_000 });
    fs.writeFileSync(stopFile(), 'stop');
    const seen = await samples(frame);

    const hookAt = new Map<number, number>();
    for (const line of fs.readFileSync(logFile(), 'utf8').split('\n')) {
      const [step, t] = line.split(' ').map(Number);
      if (Number.isFinite(step) && Number.isFinite(t)) hookAt.set(step, t);
    }
    // a summary row shows the probe's output mean: the script's step number
    const table: number[] = [];
    const imageSteps = new Map<number, number>(); // Hookscope's step in the caption → when drawn
    const offsets = new Map<number, number>(); // script step − Hookscope step → how often seen
    let lastMean: number | undefined;
    for (const s of seen) {
      const mean = Number(s.parts.mean);
      if (s.parts.mean && Number.isInteger(mean) && mean !== lastMean && hookAt.has(mean)) {
        table.push(s.t - hookAt.get(mean)!);
        lastMean = mean;
        // the detail line's step comes from the same summaries message as the mean
        const hookscopeStep = /^step (\d+)/.exec(s.parts.detail)?.[1];
        if (hookscopeStep !== undefined) {
          const d = mean - Number(hookscopeStep);
          offsets.set(d, (offsets.get(d) ?? 0) + 1);
        }
      }
      const imageStep = /step (\d+)/.exec(s.parts.caption)?.[1];
      if (imageStep !== undefined && !imageSteps.has(Number(imageStep))) imageSteps.set(Number(imageStep), s.t);
    }
    // Hookscope counts steps from its own start: the offset is constant; the most common one wins
    // over a sample where the detail line and the table were caught between two messages.
    const [offset, agreeing] = [...offsets].sort((a, b) => b[1] - a[1])[0] ?? [undefined, 0];
    const paired = [...offsets.values()].reduce((a, b) => a + b, 0);
    assert.ok(agreeing >= 0.8 * paired, `script step − Hookscope step is not constant: ${JSON.stringify([...offsets])}`);
    const images: number[] = [];
    if (offset !== undefined) {
      for (const [step, t] of imageSteps) {
        const fired = hookAt.get(step + offset);
        if (fired !== undefined && t >= fired) images.push(t - fired);
      }
    }
    assert.ok(table.length >= 20, `summary rows seen: ${table.length}`);
    assert.ok(images.length >= 10, `images seen: ${images.length} (offset ${offset})`);
    results.push(row('hook → summary row drawn in the Tensors panel (live, panel rate 4 Hz)', table));
    results.push(row('hook → image of that step drawn (live; images refresh at most once a second)', images));
    await dbg.stop();
  });

  after(function () {
    const out = process.env.HOOKSCOPE_BENCH_OUT;
    const text = [
      '| from → to, ms on one wall clock (code-server + Chromium, the real extension) | samples | p50 ms | p95 ms | max ms |',
      '|---|---|---|---|---|',
      ...results,
    ].join('\n');
    console.log(text);
    if (out) fs.writeFileSync(out, text + '\n');
  });
});
