// Issue 8, many processes: DDP under the debugger. `torchrun --nproc_per_node 2`
// (gloo, CPU) launched from VS Code with Hookscope's debug type: debugpy follows
// the ranks (VS Code opens a child session per rank), both ranks connect
// and show in the Layers tree with their rank; Break on NaN/Inf pauses rank 1 in
// the layer the NaN is born in (the panel names the rank); Continue: the averaged
// gradients carry the NaN to rank 0, which pauses a step later; Continue again and
// both ranks finish (each waited in the all-reduce while the other was paused).
import assert from 'node:assert/strict';
import { Debugger } from '../harness/debug.ts';
import { sessionSteps, startHookscopeRun } from '../harness/hookscope.ts';
import { TensorsPanel } from '../harness/tensorsPanel.ts';
import { isEvent, type TraceEvent } from '../harness/trace.ts';
import { waitFor } from '../harness/wait.ts';

describe('DDP under the debugger (torchrun, 2 ranks)', function () {
  const session = sessionSteps(() => startHookscopeRun('ddp'));

  it('1. both ranks connect, rank 1 pauses on its NaN, then rank 0; both finish', async function () {
    const { workbench, trace } = session.run();
    const dbg = new Debugger(workbench);
    const panel = new TensorsPanel(workbench);
    await workbench.openFile('ddp.py');
    await trace.waitForEvent('extension activated', isEvent('activated'), { timeoutMs: 60_000 });
    await workbench.runCommand('Hookscope: Toggle Break on NaN/Inf');
    await trace.waitForEvent('break on NaN/Inf on', isEvent('breakOnNonFinite', { enabled: true }));

    const started = trace.mark();
    await dbg.start('Hookscope: DDP (torchrun, 2 ranks)');
    const hellos = await waitFor('both ranks to connect', async () => {
      const events = trace.read().slice(started).filter(isEvent('hello'));
      return events.length >= 2 ? events : false;
    }, { timeoutMs: 120_000 });
    assert.deepEqual(hellos.map((e: TraceEvent) => e.rank).sort(), [0, 1], 'one agent per rank, none in the launcher');
    assert.ok(hellos.every((e: TraceEvent) => e.worldSize === 2 && e.debugger === true), JSON.stringify(hellos));
    const attached = await waitFor('a child debug session per rank', async () => {
      const events = trace.read().slice(started).filter(isEvent('session.child'));
      return events.length >= 2 ? events : false;
    }, { timeoutMs: 30_000 });
    const ranks = new Set(hellos.map((e: TraceEvent) => e.pid));
    assert.ok(attached.every((e: TraceEvent) => ranks.has(e.subProcessId)), `one child session per rank: ${JSON.stringify(attached)}`);

    const hit = await trace.waitForEvent('the NaN hit', (e) => e.event === 'hit' && e.pausing === true, { after: started, timeoutMs: 120_000 });
    assert.equal(hit.rank, 1, `rank 1 plants the NaN: ${JSON.stringify(hit)}`);
    assert.equal(hit.layer, 'module.fc1');
    await dbg.waitForPaused();
    const stopped = await trace.waitForEvent('DAP stopped', isEvent('dap.stopped'), { after: started });
    assert.match(String(stopped.description ?? ''), /module\.fc1/);

    // The user sees which rank: the Layers tree lists both processes by rank, the panel names rank 1.
    await workbench.expandView('Layers');
    const rows = await waitFor('the Layers tree to list both ranks', async () => {
      const text = (await workbench.treeRows('Layers')).join('\n');
      return /rank 0\/2/.test(text) && /rank 1\/2/.test(text) ? text : false;
    }, { timeoutMs: 30_000 });
    assert.match(rows, /pid \d+/);
    await panel.show();
    await panel.waitForHeadline(/Paused in layer module\.fc1/);
    assert.match(await panel.text('panel-detail'), /rank 1\/2/, 'the panel says which rank paused');
    await workbench.screenshot('ddp-rank1-paused');

    // Continue rank 1: the all-reduce hands its NaN gradients to rank 0, whose next forward makes
    // NaN in the same layer, and rank 0 pauses (its own session) one step later.
    const continued = trace.mark();
    await dbg.continue(false);
    const next = await trace.waitForEvent('rank 0 pauses next', (e) => e.event === 'hit' && e.pausing === true, { after: continued, timeoutMs: 60_000 });
    assert.deepEqual([next.rank, next.layer, next.step], [0, 'module.fc1', (hit.step as number) + 1], JSON.stringify(next));
    await trace.waitForEvent('DAP stopped in rank 0', isEvent('dap.stopped'), { after: continued });
    await dbg.waitForPaused();

    const resumed = trace.mark();
    await dbg.continue(false);
    const exits = await waitFor('both ranks to finish', async () => {
      const events = trace.read().slice(resumed).filter(isEvent('process.exited'));
      return events.length >= 2 ? events : false;
    }, { timeoutMs: 120_000 });
    assert.equal(exits.length, 2);
    await trace.waitForEvent('session ended', isEvent('session.ended'), { after: resumed, timeoutMs: 60_000 });
    await dbg.waitForSessionEnd();
  });
});
