// Node-level integration: the extension's server (BackendHub) and a real Python process with the
// hookscope agent started from the environment, exactly as a debug session would start it (no
// debugger: the breakpoint is logged, not paused). Exchanges hello, the module tree,
// setBreakpoints by file/line, a hit with summaries, watch/getSummaries, a render and an
// intervention; checks that a wrong token and a broken frame are refused without harm, and that
// ending the session leaves no Hookscope hook behind.

import { strict as assert } from 'node:assert';
import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { layersAtLine } from '../../extension/src/breakpoints/lineLayers';
import { connect } from 'node:net';
import { join, resolve } from 'node:path';
import { BackendHub, type ProcessState } from '../../extension/src/backend/hub';
import { waitFor } from '../../extension/src/common/events';
import type { Logger } from '../../extension/src/common/logger';
import { frameMessage } from '../../extension/src/protocol/codec';
import type { HitMessage, TensorSummary } from '../../extension/src/protocol/messages.gen';

const ROOT = resolve(__dirname, '..', '..');
const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const SCRIPT = join(__dirname, 'fixtures', 'tiny_model.py');
const DEADLINE_MS = 60000;

function bootstrapDir(): string | undefined {
  try {
    return execFileSync(PYTHON, ['-c', 'import hookscope.bootstrap, os; print(os.path.dirname(hookscope.bootstrap.__file__))'], {
      encoding: 'utf8', timeout: 60000,
    }).trim();
  } catch {
    return undefined;
  }
}

/** Resolves when the child printed `text` on stdout. */
function waitForOutput(child: ChildProcessWithoutNullStreams, text: string, out: { stdout: string }): Promise<void> {
  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "${text}" from the script within ${DEADLINE_MS} ms; stdout: ${out.stdout}`)), DEADLINE_MS);
    const check = () => {
      if (out.stdout.includes(text)) {
        clearTimeout(timer);
        child.stdout.off('data', check);
        resolvePromise();
      }
    };
    child.stdout.on('data', check);
    check();
  });
}

describe('integration: extension server <-> real Python backend', function () {
  this.timeout(180000);
  const messages: string[] = [];
  const log: Logger = {
    debug: (m) => messages.push(`debug ${m}`), info: (m) => messages.push(`info ${m}`),
    warn: (m) => messages.push(`warn ${m}`), error: (m) => messages.push(`error ${m}`),
  };
  let hub: BackendHub;
  let child: ChildProcessWithoutNullStreams | undefined;
  const out = { stdout: '', stderr: '' };
  let bootstrap: string | undefined;

  before(function () {
    if (!existsSync(PYTHON)) this.skip();
    bootstrap = bootstrapDir();
    assert.ok(bootstrap, 'hookscope must be installed in .venv (make setup)');
  });

  beforeEach(async () => {
    hub = new BackendHub({ log, helloDeadlineMs: 2000, requestTimeoutMs: 30000 });
    await hub.start();
  });

  afterEach(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    child = undefined;
    hub.dispose();
  });

  function startScript(env: Record<string, string>): ChildProcessWithoutNullStreams {
    out.stdout = '';
    out.stderr = '';
    const proc = spawn(PYTHON, [SCRIPT], {
      env: { ...process.env, ...env, PYTHONPATH: bootstrap!, PYTHONUNBUFFERED: '1' },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    proc.stdout.on('data', (d: Buffer) => (out.stdout += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (out.stderr += d.toString()));
    child = proc;
    return proc;
  }

  it('exchanges hello, module tree, breakpoints, a hit, summaries, a render and an intervention', async () => {
    const ticket = hub.openSession();
    const connected = waitFor(hub.onDidConnect, () => true, DEADLINE_MS, 'the hello');
    const modelFound = waitFor(hub.onDidChangeModels, (p) => p.models.size > 0, DEADLINE_MS, 'the module tree');
    const proc = startScript(ticket.env);

    const process1: ProcessState = await connected;
    assert.equal(process1.pid, proc.pid);
    assert.equal(process1.sessionKey, ticket.key);
    assert.equal(process1.rank, 0);
    assert.equal(process1.debugger, false);

    await modelFound;
    const model = [...process1.models.values()][0].tree;
    const conv1 = model.modules.find((m) => m.name === 'conv1');
    assert.ok(conv1, `conv1 in ${model.modules.map((m) => m.name).join(', ')}`);
    const definitionLine = readFileSync(SCRIPT, 'utf8').split('\n').findIndex((l) => l.includes('DEFINITION-LINE conv1')) + 1;
    assert.equal(conv1.cls, 'Conv2d');
    assert.equal(conv1.line, definitionLine);
    assert.equal(resolve(conv1.file!), SCRIPT);
    assert.equal(conv1.totalParams, 4 * 1 * 3 * 3 + 4);

    // Which layers a line means, as the cursor commands ask it: the backend's own resolver.
    const source = readFileSync(SCRIPT, 'utf8').split('\n');
    const callLine = source.findIndex((l) => l.includes('x = torch.relu(self.conv1(x))')) + 1;
    assert.deepEqual((await layersAtLine(hub, SCRIPT, callLine)).map((r) => `${r.process}/${r.layer}`), [`${process1.id}/conv1`]);
    assert.deepEqual((await layersAtLine(hub, SCRIPT, definitionLine)).map((r) => r.layer), ['conv1']);
    assert.deepEqual(await layersAtLine(hub, SCRIPT, 1), []);

    // A breakpoint on the definition line, as the editor sends it, and one that matches nothing.
    const resolved = waitFor(hub.onDidResolveBreakpoints, (p) => p.resolutions.length === 2, DEADLINE_MS, 'the resolution');
    await hub.setBreakpoints([
      { id: 'bp-conv', file: SCRIPT, line: definitionLine, phases: ['backward'], enabled: true },
      { id: 'bp-none', file: SCRIPT, line: 1, phases: ['forward'], enabled: true },
    ]);
    const resolutions = (await resolved).resolutions;
    assert.deepEqual(resolutions.find((r) => r.id === 'bp-conv')!.layers, ['conv1']);
    const none = resolutions.find((r) => r.id === 'bp-none')!;
    assert.equal(none.layers.length, 0);

    // Run: the backward hook of conv1 fires; without a debugger it is logged and not paused.
    const hitPromise = waitFor(hub.onHit, ({ hit }) => hit.breakpoint === 'bp-conv', DEADLINE_MS, 'the hit');
    proc.stdin.write('go\n');
    const { hit } = await hitPromise as { hit: HitMessage };
    assert.equal(hit.layer, 'conv1');
    assert.equal(hit.phase, 'backward');
    assert.equal(hit.pausing, false);
    assert.match(hit.reason, /conv1/);
    const gradOut = hit.summaries.find((s: TensorSummary) => s.path.startsWith('grad_output'));
    assert.ok(gradOut, `grad_output in ${hit.summaries.map((s) => s.path).join(', ')}`);
    assert.deepEqual(gradOut.shape, [2, 4, 8, 8]);
    assert.equal(gradOut.nan, 0);
    assert.ok(typeof gradOut.norm === 'number' && gradOut.norm > 0);
    await waitForOutput(proc, 'steps done', out);

    // While it runs: the layer's last summaries and its parameters' gradients (read by the
    // training thread at the model's next forward: .grad is never read while backward writes it).
    let settled = false;
    const summariesReply = hub.request(process1.id, 'getSummaries', { layer: 'conv1', model: model.id })
      .finally(() => { settled = true; });
    const stepsDone = () => out.stdout.split('steps done').length - 1;
    for (let round = 1; !settled && round <= 20; round++) {  // keep it stepping until the reply comes
      const before = stepsDone();
      proc.stdin.write('go\n');
      await Promise.race([summariesReply, new Promise<void>((resolveSteps) => {
        const check = () => {
          if (stepsDone() > before) {
            proc.stdout.off('data', check);
            resolveSteps();
          }
        };
        proc.stdout.on('data', check);
      })]);
    }
    const summaries = await summariesReply;
    const paths = (summaries.tensors).map((t) => t.path);
    assert.ok(paths.includes('weight.grad'), `weight.grad in ${paths.join(', ')}`);

    // A feature map of conv1's output: a real PNG of the announced size.
    await hub.request(process1.id, 'watch', { layers: ['conv1'], model: model.id, rateHz: 50 });
    proc.stdin.write('go\n');
    await waitFor(hub.onSummaries, ({ event }) => event.layer === 'conv1', DEADLINE_MS, 'live summaries');
    const image = await hub.request(process1.id, 'render', { view: 'featureMap', layer: 'conv1', model: model.id, options: { per_page: 64 } }, 60000);
    assert.ok(image.png instanceof Uint8Array);
    assert.equal(Buffer.from(image.png.subarray(1, 4)).toString('ascii'), 'PNG');
    assert.equal(Buffer.from(image.png).readUInt32BE(16), image.width);
    assert.equal(Buffer.from(image.png).readUInt32BE(20), image.height);
    assert.deepEqual(image.meta.channels, [0, 1, 2, 3]);

    // An intervention: listed, then removed by its id.
    const added = await hub.request(process1.id, 'addIntervention', { layer: 'conv1', kind: 'zero_channels', model: model.id, channels: [0, 1] });
    const listed = await hub.refreshInterventions(process1.id);
    assert.deepEqual(listed.map((i) => i.id), [added.id]);
    const removed = await hub.request(process1.id, 'removeIntervention', { intervention: added.id });
    assert.equal(removed.removed, 1);
    assert.deepEqual(await hub.refreshInterventions(process1.id), []);

    // Hookscope's hooks are visible in the inventory while breakpoints are set...
    const hooks = await hub.request(process1.id, 'listHooks', { model: model.id });
    assert.ok((hooks.hooks as { owner?: string }[]).some((h) => h.owner === 'hookscope'), JSON.stringify(hooks.hooks));
    // ...and all gone after removeHooks.
    await hub.request(process1.id, 'watch', { layers: [], model: model.id });
    const cleared = await hub.request(process1.id, 'removeHooks', {});
    assert.ok(cleared.removed >= 1);
    const after = await hub.request(process1.id, 'listHooks', { model: model.id });
    assert.deepEqual((after.hooks as { owner?: string }[]).filter((h) => h.owner === 'hookscope'), []);

    // Ending the session says goodbye; the process goes on and exits normally.
    const exited = waitFor(hub.onDidExit, (e) => e.process.id === process1.id, DEADLINE_MS, 'the disconnect');
    hub.closeSession(ticket.key, 'test over');
    await exited;
    assert.equal(hub.processes().length, 0);
    proc.stdin.write('exit\n');
    const code = await new Promise<number | null>((r) => (proc.exitCode !== null ? r(proc.exitCode) : proc.once('exit', r)));
    assert.equal(code, 0, out.stderr);
  });

  it('refuses a wrong token and a broken first frame, with a clear reason', async () => {
    hub.openSession();
    const rejected = waitFor(hub.onDidReject, (r) => r.reason === 'token refused', DEADLINE_MS, 'the refusal');
    const proc = startScript({ HOOKSCOPE_ADDR: hub.address, HOOKSCOPE_TOKEN: 'not-the-token', HOOKSCOPE_SESSION: 'x' });
    await rejected;
    assert.equal(hub.processes().length, 0);
    assert.ok(messages.some((m) => m.includes('wrong token')));
    assert.ok(!messages.some((m) => m.includes('not-the-token')), 'the token is never echoed in the log');
    // The script itself is unharmed: it still runs its steps.
    await waitForOutput(proc, 'model ready', out);
    proc.stdin.write('go\n');
    await waitForOutput(proc, 'steps done', out);

    // A raw client that sends garbage, then one that never says hello: both closed.
    const [host, port] = hub.address.split(':');
    for (const payload of [Buffer.from('0000000393010203', 'hex'), frameMessage({ type: 'ping', id: 1 })]) {
      const closedReason = waitFor(hub.onDidReject, () => true, DEADLINE_MS, 'the close');
      const socket = connect(Number(port), host);
      const replies: Buffer[] = [];
      socket.on('data', (d) => replies.push(d));
      socket.on('error', () => undefined);
      socket.write(payload);
      const { reason } = await closedReason;
      assert.match(reason, /hello|protocol error|not a valid|first message/);
      socket.destroy();
    }
  });
});
