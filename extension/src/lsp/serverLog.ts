// The language server's stderr, logged at the level each line was written at (pure: no `vscode`).
//
// vscode-languageclient logs every stderr line as an error by default, so a pygls warning
// ("Cancel notification for unknown message id") showed as [error]. The server writes each
// log record as `hookscope.lsp LEVEL logger: message` (server.py's LOG_FORMAT); a line
// without that prefix continues the record above it (a traceback), and text before any
// record (the interpreter failing before logging is set up) is an error.

export type ServerLogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error';

/** The prefix of a record, as `hookscope.lsp.server.LOG_FORMAT` writes it. */
const RECORD = /^hookscope\.lsp (DEBUG|INFO|WARNING|ERROR|CRITICAL) /;

const LEVELS: Record<string, ServerLogLevel> = {
  DEBUG: 'debug', INFO: 'info', WARNING: 'warn', ERROR: 'error', CRITICAL: 'error',
};

/** Gives each stderr line its level; keeps the level of the record a continuation line belongs to. */
export class ServerLogLevels {
  private current: ServerLogLevel = 'error';

  levelOf(line: string): ServerLogLevel {
    const match = RECORD.exec(line);
    if (match) this.current = LEVELS[match[1]];
    return this.current;
  }
}

/** The sink `ServerLogLevels` writes to: a vscode.LogOutputChannel has these methods. */
export type LevelledLog = Record<ServerLogLevel, (message: string) => void>;

/** Write `line` to `log` at its level. */
export function logServerLine(levels: ServerLogLevels, log: LevelledLog, line: string): void {
  log[levels.levelOf(line)](line);
}
