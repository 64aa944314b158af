// "Show in Hookscope": the DAP `evaluate` expression that hands a value of the paused frame to
// the backend, and the parsing of its answer. Pure (no `vscode`): unit-tested.
//
// The user's expression (a Variables view `evaluateName` such as `batch['image']` or
// `out.logits[0]`, or a selection in the editor) never becomes code here: it travels as a
// Python string literal to `hookscope.debugger.inspector.publish`, which compiles it in 'eval' mode in
// the frame. So `a, b`, a newline or an unbalanced bracket cannot turn into a different call.

/** Longest expression accepted (a selection of a whole function is a mistake, not an expression). */
export const MAX_EXPRESSION_LENGTH = 2000;

export type ExpressionCheck = { ok: true; expression: string } | { ok: false; reason: string };

/** Trimmed expression, or why it cannot be shown. */
export function checkExpression(raw: unknown): ExpressionCheck {
  if (typeof raw !== 'string') return { ok: false, reason: 'no expression to show' };
  const expression = raw.trim();
  if (!expression) return { ok: false, reason: 'select an expression (or a variable) first' };
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    return { ok: false, reason: `the expression is longer than ${MAX_EXPRESSION_LENGTH} characters` };
  }
  // Control characters other than tab and line breaks are never part of a Python expression.
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/.test(expression)) {
    return { ok: false, reason: 'the expression contains control characters' };
  }
  return { ok: true, expression };
}

/** A Python string literal for `text`: ASCII only, every quote, backslash and non-printable escaped. */
export function pythonStringLiteral(text: string): string {
  let out = "'";
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (ch === '\\') out += '\\\\';
    else if (ch === "'") out += "\\'";
    else if (ch === '\n') out += '\\n';
    else if (ch === '\r') out += '\\r';
    else if (ch === '\t') out += '\\t';
    else if (code >= 0x20 && code < 0x7f) out += ch;
    else if (code <= 0xff) out += `\\x${code.toString(16).padStart(2, '0')}`;
    else if (code <= 0xffff) out += `\\u${code.toString(16).padStart(4, '0')}`;
    else out += `\\U${code.toString(16).padStart(8, '0')}`;
  }
  return `${out}'`;
}

const HANDLE = /^[A-Za-z0-9_-]{1,64}$/;

/** The `evaluate` expression that publishes `expression`'s value under `handle`. */
export function publishExpression(expression: string, handle: string): string {
  if (!HANDLE.test(handle)) throw new Error(`bad handle ${JSON.stringify(handle)}`);
  return `__import__('hookscope.debugger.inspector', fromlist=['publish']).publish(${pythonStringLiteral(expression)}, '${handle}')`;
}

export type PublishResult =
  | { ok: true; pid: number; handle: string; line: string }
  | { ok: false; message: string };

/**
 * The `evaluate` result of `publishExpression`: debugpy shows the returned str as its repr
 * (quoted with ' or "), so the markers are searched inside it.
 */
export function parsePublishResult(result: string): PublishResult {
  const text = unquote(result.trim());
  const ok = /^hookscope-ok pid=(\d+) handle=([A-Za-z0-9_-]+) ?(.*)$/s.exec(text);
  if (ok) return { ok: true, pid: Number(ok[1]), handle: ok[2], line: ok[3] };
  const error = /^hookscope-error: (.*)$/s.exec(text);
  if (error) return { ok: false, message: error[1] };
  if (/No module named ['"]?hookscope/.test(text)) {
    return { ok: false, message: 'the hookscope package is not importable in the debugged process' };
  }
  return { ok: false, message: text.slice(0, 300) || 'no answer from the debugger' };
}

function unquote(text: string): string {
  if (text.length >= 2 && (text[0] === "'" || text[0] === '"') && text[text.length - 1] === text[0]) {
    return text.slice(1, -1).replace(/\\(['"\\])/g, '$1');
  }
  return text;
}

let handleCounter = 0;

/** A fresh handle for one publication (unique within the window). */
export function newHandle(random: () => number = Math.random): string {
  handleCounter += 1;
  return `v${handleCounter.toString(36)}${Math.floor(random() * 36 ** 6).toString(36)}`;
}

/** The label the panel shows for a Variables view item: its evaluate name, else its name. */
export function variableExpression(variable: { name?: unknown; evaluateName?: unknown } | undefined): string | undefined {
  if (!variable) return undefined;
  if (typeof variable.evaluateName === 'string' && variable.evaluateName.trim()) return variable.evaluateName;
  if (typeof variable.name === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(variable.name)) return variable.name;
  return undefined;
}
