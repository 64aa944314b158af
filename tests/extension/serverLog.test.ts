// The language server's stderr is logged at each record's own level (extension/src/lsp/serverLog.ts).
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { logServerLine, ServerLogLevels, type LevelledLog, type ServerLogLevel } from '../../extension/src/lsp/serverLog';

const PYTHON = join(__dirname, '..', '..', '.venv', 'bin', 'python');

function collect(lines: string[]): [ServerLogLevel, string][] {
  const out: [ServerLogLevel, string][] = [];
  const at = (level: ServerLogLevel) => (m: string) => void out.push([level, m]);
  const sink: LevelledLog = { trace: at('trace'), debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  const levels = new ServerLogLevels();
  for (const line of lines) logServerLine(levels, sink, line);
  return out;
}

function frame(message: object): string {
  const body = JSON.stringify(message);
  return `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

describe('language server log levels', () => {
  it('a warning is a warning; a traceback stays with its record; text before any record is an error', () => {
    const out = collect([
      'Traceback (most recent call last):',
      'hookscope.lsp WARNING pygls.protocol.json_rpc: Cancel notification for unknown message id "7"',
      'hookscope.lsp ERROR hookscope.lsp.server: diagnostics failed for file:///a.py',
      'Traceback (most recent call last):',
      '  File "x.py", line 1',
      'hookscope.lsp INFO hookscope.lsp.server: started',
      'hookscope.lsp CRITICAL root: gone',
      'hookscope.lsp DEBUG root: detail',
    ]);
    assert.deepEqual(out.map(([level]) => level), ['error', 'warn', 'error', 'error', 'error', 'info', 'error', 'debug']);
  });

  it("the real server's pygls warning (a cancel for an unknown request) is logged as a warning", function () {
    this.timeout(60_000);
    const input = [
      frame({ jsonrpc: '2.0', method: '$/cancelRequest', params: { id: 999 } }),
      frame({ jsonrpc: '2.0', id: 1, method: 'shutdown' }),
      frame({ jsonrpc: '2.0', method: 'exit' }),
    ].join('');
    const result = spawnSync(PYTHON, ['-m', 'hookscope.lsp'], { input, encoding: 'utf-8', timeout: 50_000 });
    assert.equal(result.status, 0, result.stderr);
    const logged = collect(result.stderr.split('\n').filter((l) => l.length > 0));
    const cancel = logged.find(([, m]) => m.includes('Cancel notification for unknown message id "999"'));
    assert.ok(cancel, result.stderr);
    assert.equal(cancel[0], 'warn');
    assert.deepEqual(logged.filter(([level]) => level === 'error'), []);
  });
});
