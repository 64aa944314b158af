// "Show in Hookscope": the evaluate expression built from a Variables view evaluateName or a
// selection (checked by Python's own parser), parsing debugpy's answer, the launch switch of
// the tensor presentation, and the Inspect view's slicing state.
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { injectHookscope, type PythonLaunchConfig } from '../../extension/src/debug/launchEnv';
import {
  MAX_EXPRESSION_LENGTH, checkExpression, newHandle, parsePublishResult, publishExpression, pythonStringLiteral, variableExpression,
} from '../../extension/src/views/inspectExpression';
import {
  canFeatureMap, decodeValues, formatValue, initialInspectUi, inspectOptions, inspectReducer, otherAxes, sliceShape, valueAt,
} from '../../extension/webview/inspectState';

const PYTHON = join(__dirname, '..', '..', '.venv', 'bin', 'python');

const TRICKY = [
  'x', "batch['image']", 'out.logits[0, :, 3]', 'a, b', "it's \"quoted\" \\ back\\slash", 'f(a,\n   b)',
  'x)\nimport os\n(x', 'naïve_ünïcode + 𝛼', 'tab\there', "'''", '\\', 'x\r\ny',
];

describe('inspect: the publish expression', () => {
  it('passes the user expression as one Python string literal (checked by Python itself)', function () {
    if (!existsSync(PYTHON)) this.skip();
    const calls = TRICKY.map((e) => publishExpression(e, 'h1'));
    const check = [
      'import ast, json, sys',
      'calls, wanted = json.load(sys.stdin)',
      'for call, want in zip(calls, wanted):',
      "    tree = ast.parse(call, mode='eval').body",
      "    assert isinstance(tree, ast.Call) and tree.func.attr == 'publish', call",
      '    assert len(tree.args) == 2 and not tree.keywords, call',
      '    assert tree.args[0].value == want, (tree.args[0].value, want)',
      "    assert tree.args[1].value == 'h1'",
      "    assert call.isascii(), call",
      "print('ok', len(calls))",
    ].join('\n');
    const result = spawnSync(PYTHON, ['-c', check], { input: JSON.stringify([calls, TRICKY]), encoding: 'utf-8' });
    assert.equal(result.status, 0, result.stderr);
    assert.equal(result.stdout.trim(), `ok ${TRICKY.length}`);
  });

  it('escapes quotes, backslashes and non-ASCII', () => {
    assert.equal(pythonStringLiteral("a'b"), "'a\\'b'");
    assert.equal(pythonStringLiteral('a\\b'), "'a\\\\b'");
    assert.equal(pythonStringLiteral('é'), "'\\xe9'");
    assert.equal(pythonStringLiteral('α'), "'\\u03b1'");
    assert.equal(pythonStringLiteral('𝛼'), "'\\U0001d6fc'");
  });

  it('refuses bad handles and bad expressions', () => {
    assert.throws(() => publishExpression('x', "h'); import os; ('"));
    assert.deepEqual(checkExpression('  x[0]  '), { ok: true, expression: 'x[0]' });
    assert.equal(checkExpression('   ').ok, false);
    assert.equal(checkExpression(undefined).ok, false);
    assert.equal(checkExpression('x\u0000').ok, false);
    assert.equal(checkExpression('x'.repeat(MAX_EXPRESSION_LENGTH + 1)).ok, false);
    assert.equal(checkExpression('f(a,\n b)').ok, true);
  });

  it('takes the evaluate name of a Variables view item, else a plain name', () => {
    assert.equal(variableExpression({ name: '0', evaluateName: "nested['a'][0]" }), "nested['a'][0]");
    assert.equal(variableExpression({ name: 'x' }), 'x');
    assert.equal(variableExpression({ name: "'a'" }), undefined);
    assert.equal(variableExpression(undefined), undefined);
  });

  it('makes fresh handles that the backend accepts', () => {
    const a = newHandle();
    const b = newHandle();
    assert.notEqual(a, b);
    for (const h of [a, b]) assert.match(h, /^[A-Za-z0-9_-]{1,64}$/);
  });

  it("parses debugpy's repr of the answer", () => {
    assert.deepEqual(parsePublishResult(`'hookscope-ok pid=42 handle=v1 tensor[2, 3] f32 cpu x=[1, 2]'`),
      { ok: true, pid: 42, handle: 'v1', line: 'tensor[2, 3] f32 cpu x=[1, 2]' });
    assert.deepEqual(parsePublishResult(`"hookscope-ok pid=7 handle=v2 tensor[4] f32 cpu μ=1 σ=0 [1, 1]"`),
      { ok: true, pid: 7, handle: 'v2', line: 'tensor[4] f32 cpu μ=1 σ=0 [1, 1]' });
    assert.deepEqual(parsePublishResult(`"hookscope-error: NameError: name 'y' is not defined"`),
      { ok: false, message: "NameError: name 'y' is not defined" });
    const missing = parsePublishResult("Traceback ...\nModuleNotFoundError: No module named 'hookscope'");
    assert.equal(missing.ok, false);
    assert.match((missing as { message: string }).message, /not importable/);
  });
});

describe('inspect: the tensor presentation switch in the launch environment', () => {
  const params = { env: { HOOKSCOPE_ADDR: 'a' }, bootstrapDir: '/b', pathSeparator: ':', sessionKey: 'k' };
  it('sets HOOKSCOPE_TENSOR_VIEW from the setting, and leaves it alone when not given', () => {
    const bare: PythonLaunchConfig = { type: 'debugpy' };
    const withEnv: PythonLaunchConfig = { type: 'debugpy', env: { X: '1' } };
    assert.equal(injectHookscope(bare, { ...params, tensorPresentation: false }).env?.HOOKSCOPE_TENSOR_VIEW, '0');
    assert.equal(injectHookscope(bare, { ...params, tensorPresentation: true }).env?.HOOKSCOPE_TENSOR_VIEW, '1');
    assert.equal(injectHookscope(withEnv, params).env?.HOOKSCOPE_TENSOR_VIEW, undefined);
  });
});

describe('inspect: slicing state', () => {
  it('shows the last two axes first, with sliders on the others', () => {
    const ui = initialInspectUi('h', [2, 3, 4, 5]);
    assert.deepEqual(ui.axes, [2, 3]);
    assert.deepEqual(otherAxes(ui), [0, 1]);
    assert.deepEqual(ui.index, { 0: 0, 1: 0 });
    assert.deepEqual(inspectOptions(ui), { view: 'slice', axes: [2, 3], index: { 0: 0, 1: 0 } });
    assert.deepEqual(sliceShape(ui), [4, 5]);
  });

  it('choosing an axis moves the slider to the axis it replaces; choosing the other swaps', () => {
    let ui = initialInspectUi('h', [2, 3, 4, 5]);
    ui = inspectReducer(ui, { type: 'position', axis: 1, position: 2 });
    ui = inspectReducer(ui, { type: 'axis', which: 0, axis: 1 });
    assert.deepEqual(ui.axes, [1, 3]);
    assert.deepEqual(ui.index, { 0: 0, 2: 0 });
    ui = inspectReducer(ui, { type: 'axis', which: 1, axis: 1 });
    assert.deepEqual(ui.axes, [3, 1], 'the same axis on both: swapped');
    assert.deepEqual(sliceShape(ui), [5, 3]);
    assert.equal(inspectReducer(ui, { type: 'axis', which: 0, axis: 9 }), ui, 'an axis out of range is ignored');
  });

  it('clamps positions and ignores displayed axes', () => {
    let ui = initialInspectUi('h', [2, 3, 4]);
    ui = inspectReducer(ui, { type: 'position', axis: 0, position: 99 });
    assert.equal(ui.index[0], 1);
    ui = inspectReducer(ui, { type: 'position', axis: 0, position: -4 });
    assert.equal(ui.index[0], 0);
    assert.equal(inspectReducer(ui, { type: 'position', axis: 2, position: 1 }), ui);
  });

  it('offers the feature-map grid for (N, C, H, W) only, with batch, pages and a channel', () => {
    assert.equal(canFeatureMap([1, 64, 8, 8]), true);
    assert.equal(canFeatureMap([64, 8, 8]), false);
    const three = initialInspectUi('h', [3, 8, 8]);
    assert.equal(inspectReducer(three, { type: 'mode', mode: 'featureMap' }), three);
    let ui = inspectReducer(initialInspectUi('h', [4, 130, 8, 8]), { type: 'mode', mode: 'featureMap' });
    ui = inspectReducer(ui, { type: 'batch', batch: 7 });
    ui = inspectReducer(ui, { type: 'page', delta: 5 });
    assert.deepEqual(inspectOptions(ui), { view: 'featureMap', batch: 3, page: 2, per_page: 64 });
    ui = inspectReducer(ui, { type: 'channel', channel: 129 });
    assert.equal(inspectOptions(ui).channel, 129);
    assert.equal(inspectReducer(ui, { type: 'page', delta: -1 }).channel, undefined);
  });

  it('1-D and 0-D tensors have no axes to choose', () => {
    const one = initialInspectUi('h', [7]);
    assert.deepEqual(otherAxes(one), []);
    assert.deepEqual(inspectOptions(one), { view: 'slice' });
    assert.deepEqual(sliceShape(one), [1, 7]);
  });
});

describe('inspect: value readout', () => {
  const encode = (values: number[]): string => {
    const buffer = Buffer.alloc(values.length * 4);
    values.forEach((v, i) => buffer.writeFloatLE(v, i * 4));
    return buffer.toString('base64');
  };

  it('decodes float32 little-endian values, NaN and Inf included', () => {
    const v = decodeValues(encode([1.5, Number.NaN, Number.POSITIVE_INFINITY, -2]), [2, 2], [1, 1])!;
    assert.deepEqual([...v.values].map(formatValue), ['1.5', 'NaN', '+Inf', '-2']);
    assert.equal(decodeValues(encode([1, 2, 3]), [2, 2], [1, 1]), undefined, 'a size mismatch is refused');
  });

  it('maps the pointer to the element, exactly when every value was sent', () => {
    const v = decodeValues(encode([0, 1, 2, 3, 4, 5]), [2, 3], [1, 1])!;
    assert.deepEqual(valueAt(v, 2, 3, 0.9, 0.9), { row: 1, col: 2, value: 5, exact: true });
    assert.deepEqual(valueAt(v, 2, 3, 0.0, 0.6), { row: 1, col: 0, value: 3, exact: true });
    assert.equal(valueAt(v, 2, 3, 1.0, 0.5), undefined, 'off the image');
  });

  it('uses the nearest sent element of a large slice, with its true index', () => {
    // A 600 x 10 slice sent every 3rd row: values[i][j] is element (3i, j).
    const rows = Array.from({ length: 200 * 10 }, (_, k) => Math.floor(k / 10) * 3 * 10 + (k % 10));
    const v = decodeValues(encode(rows), [200, 10], [3, 1])!;
    const r = valueAt(v, 600, 10, 0.75, 46 / 600)!;
    assert.deepEqual(r, { row: 45, col: 7, value: 457, exact: false });
  });
});
