// What Hookscope asks of the user's interpreter: the probe (run for real with the repo's venv and a
// bare one), its reading, and the words for each thing that can be missing. Never `pip install hookscope`.
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  MIN_PYTHON, parseProbe, probeScript, problemDetail, problemMessage, problemOf, type ProbeAnswer,
} from '../../extension/src/debug/interpreterCheck';

const ROOT = join(__dirname, '..', '..');
const VENV_PYTHON = join(ROOT, '.venv', 'bin', 'python');

function probe(python: string, source: 'bundled' | 'environment'): ProbeAnswer | undefined {
  return parseProbe(execFileSync(python, ['-c', probeScript(source)], { encoding: 'utf8', timeout: 60_000 }));
}

describe('debug: what the interpreter needs', () => {
  it('the probe answers for the repo venv: a recent Python with torch, and its own hookscope when asked', function () {
    if (!existsSync(VENV_PYTHON)) this.skip();
    this.timeout(60_000);
    const bundled = probe(VENV_PYTHON, 'bundled')!;
    assert.equal(bundled.torch, true);
    assert.equal(bundled.bootstrap, undefined, 'the bundled source never imports the interpreter\'s hookscope');
    assert.equal(problemOf(bundled, 'bundled'), undefined);
    const environment = probe(VENV_PYTHON, 'environment')!;
    assert.match(environment.bootstrap ?? '', /hookscope[\\/]bootstrap$/);
    assert.equal(problemOf(environment, 'environment'), undefined);
  });

  it('a bare venv has no torch, and no hookscope of its own', function () {
    this.timeout(60_000);
    const dir = mkdtempSync(join(tmpdir(), 'hs-bare-'));
    try {
      execFileSync('python3', ['-m', 'venv', '--without-pip', dir], { timeout: 60_000 });
      const python = join(dir, 'bin', 'python');
      const bundled = probe(python, 'bundled')!;
      assert.equal(problemOf(bundled, 'bundled'), 'no-torch');
      const environment = probe(python, 'environment')!;
      assert.match(environment.hookscopeError ?? '', /ModuleNotFoundError/);
      assert.equal(problemOf({ ...environment, torch: true }, 'environment'), 'no-hookscope');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads the last JSON line, past what a sitecustomize printed', () => {
    const answer = parseProbe('hello from sitecustomize\n{"version": [3, 11, 7], "torch": true}\n');
    assert.deepEqual(answer, { version: [3, 11, 7], torch: true });
    assert.equal(parseProbe('Traceback ...\nSyntaxError'), undefined);
  });

  it('a Python older than the floor comes first, with its version in the words', () => {
    const old: ProbeAnswer = { version: [3, 8, 10], torch: false };
    assert.equal(problemOf(old, 'bundled'), 'python-too-old');
    const message = problemMessage('python-too-old', '/usr/bin/python3.8', problemDetail(old, 'python-too-old'));
    assert.match(message, new RegExp(`Python ${MIN_PYTHON.join('\\.')} or newer`));
    assert.match(message, /"\/usr\/bin\/python3\.8" is Python 3\.8\.10/);
  });

  it('every message names the interpreter and what is missing, and offers no pip install of hookscope', () => {
    const python = '/home/me/venv/bin/python';
    const messages = {
      'no-interpreter': /could not run.*\/home\/me\/venv\/bin\/python.*not found/,
      'python-too-old': /Python 3\.10 or newer/,
      'no-torch': /has no torch/,
      'no-hookscope': /hookscope\.backend is "environment".*no hookscope package/,
    } as const;
    for (const [problem, pattern] of Object.entries(messages)) {
      const text = problemMessage(problem as keyof typeof messages, python, 'not found');
      assert.match(text, pattern);
      assert.ok(text.includes(python), `${problem} names the interpreter: ${text}`);
      assert.doesNotMatch(text, /pip install hookscope/);
    }
  });
});
