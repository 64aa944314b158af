// The TypeScript codec against the shared vectors (tests/vectors), plus stream splitting and bounds.
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  FrameReader,
  ProtocolError,
  decodeBody,
  frameMessage,
  validate,
  validateReply,
} from '../../extension/src/protocol/codec';
import { MAX_DEPTH, MAX_FRAME_BYTES, MESSAGE_SPECS } from '../../extension/src/protocol/messages.gen';
import { proof, proofMatches } from '../../extension/src/protocol/handshake';

const vectorsDir = join(__dirname, '..', 'vectors');
/** `replyTo`: a reply whose body is also checked against that request's reply fields. */
interface ValidVector { name: string; message: unknown; hex: string; replyTo?: string }
interface InvalidVector { name: string; hex: string; code: string; replyTo?: string }
const valid = JSON.parse(readFileSync(join(vectorsDir, 'valid.json'), 'utf8')) as ValidVector[];
const invalid = JSON.parse(readFileSync(join(vectorsDir, 'invalid.json'), 'utf8')) as InvalidVector[];

/** JSON form of the vectors -> in-memory form ({"$bin": hex} becomes bytes). */
function fromJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(fromJson);
  if (value && typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj);
    if (keys.length === 1 && keys[0] === '$bin') return new Uint8Array(Buffer.from(obj.$bin as string, 'hex'));
    return Object.fromEntries(keys.map((k) => [k, fromJson(obj[k])]));
  }
  return value;
}

/** Decode a whole frame (header included) the way a connection does: split, decode, validate
 * (a reply's body too, against `replyTo`'s reply fields). */
function decodeFrame(hex: string, replyTo?: string): unknown {
  const messages = new FrameReader().feed(Buffer.from(hex, 'hex'));
  assert.equal(messages.length, 1, 'exactly one message in the frame');
  validate(messages[0]);
  if (replyTo !== undefined) validateReply(replyTo, (messages[0] as { body?: unknown }).body);
  return messages[0];
}

describe('codec: shared valid vectors', () => {
  assert.ok(valid.length >= 8);
  for (const vector of valid) {
    it(`encodes ${vector.name} to the exact bytes`, () => {
      assert.equal(frameMessage(fromJson(vector.message) as object).toString('hex'), vector.hex);
    });
    it(`decodes ${vector.name} to the same message`, () => {
      assert.deepEqual(decodeFrame(vector.hex, vector.replyTo), fromJson(vector.message));
    });
  }
  it('covers every message type of MESSAGE_SPECS', () => {
    const types = new Set(valid.map((v) => (decodeFrame(v.hex) as { type: string }).type));
    assert.deepEqual([...types].sort(), Object.keys(MESSAGE_SPECS).sort());
  });
  it('keeps a bin value as bytes', () => {
    const render = valid.find((v) => v.name === 'renderReply')!;
    const msg = decodeFrame(render.hex) as { body: { png: Uint8Array } };
    assert.ok(msg.body.png instanceof Uint8Array);
    assert.equal(Buffer.from(msg.body.png).toString('hex'), '89504e470d0a1a0a');
  });
});

describe('codec: shared invalid vectors', () => {
  assert.ok(invalid.length >= 10);
  for (const vector of invalid) {
    it(`refuses "${vector.name}" with ${vector.code}`, () => {
      assert.throws(
        () => decodeFrame(vector.hex, vector.replyTo),
        (err: unknown) => err instanceof ProtocolError && err.code === vector.code,
      );
    });
  }
});

describe('codec: FrameReader', () => {
  it('splits frames delivered one byte at a time and several per chunk', () => {
    const frames = Buffer.concat(valid.map((v) => Buffer.from(v.hex, 'hex')));
    const reader = new FrameReader();
    const got: unknown[] = [];
    for (const byte of frames) got.push(...reader.feed(Uint8Array.of(byte)));
    assert.equal(got.length, valid.length);
    assert.deepEqual(got[0], fromJson(valid[0].message));
    const together = new FrameReader().feed(frames);
    assert.deepEqual(together, got);
    assert.equal(reader.pendingBytes, 0);
  });

  it('refuses an oversize frame from the header alone', () => {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_FRAME_BYTES + 1);
    assert.throws(() => new FrameReader().feed(header), ProtocolError);
  });
});

describe('codec: bounds and types', () => {
  it('accepts nesting up to MAX_DEPTH and refuses one more', () => {
    const nested = (depth: number): unknown => (depth <= 1 ? 0 : [nested(depth - 1)]);
    // Same rule as codec.py: the map is depth 1, `v` depth 2, the innermost scalar depth MAX_DEPTH.
    const ok = { type: 'notice', level: 'info', message: 'x', v: nested(MAX_DEPTH - 1) };
    const body = frameMessage(ok).subarray(4);
    assert.deepEqual(decodeBody(body), ok);
    const tooDeep = { type: 'notice', level: 'info', message: 'x', v: nested(MAX_DEPTH) };
    assert.throws(() => decodeBody(frameMessage(tooDeep).subarray(4)), /deeper/);
  });

  it('refuses trailing bytes, ext types and integer map keys', () => {
    const body = frameMessage({ type: 'ping', id: 1 }).subarray(4);
    assert.throws(() => decodeBody(Buffer.concat([body, Buffer.from([0xc0])])), /extra bytes/);
    assert.throws(() => decodeBody(Buffer.from('d6ff00000000', 'hex')), /extension/);
    assert.throws(() => decodeBody(Buffer.from('8101a1', 'hex')), /keys must be strings/);
  });

  it('validates field types, integer ids and unknown types', () => {
    assert.equal(validate({ type: 'watch', id: 2, layers: ['a'], rateHz: 4 }).type, 'watch');
    assert.throws(() => validate({ type: 'watch', id: 2.5, layers: [] }), /integer 'id'/);
    assert.throws(() => validate({ type: 'hit' }), (e: unknown) => (e as ProtocolError).code === 'badMessage');
    assert.throws(() => validate({ type: 'toString' }), (e: unknown) => (e as ProtocolError).code === 'unknownType');
    assert.throws(() => validate([1, 2]), /must be a map/);
  });
});

describe('codec: nested shapes and replies (mirror of test_protocol.py)', () => {
  const summary = { path: 'output', shape: [2], dtype: 'float32', device: 'cpu', numel: 2, nan: 0, posinf: 0, neginf: 0 };
  const event = { type: 'summaries', model: 'm', layer: 'fc', phase: 'forward', step: 0, tensors: [summary] };
  it('checks struct fields inside lists and names the path', () => {
    assert.equal(validate(event).type, 'summaries');
    assert.throws(() => validate({ ...event, tensors: [{ ...summary, nan: '0' }] }), /'tensors'\[0\]\.nan must be int, got string/);
    const { numel: _numel, ...withoutNumel } = summary;
    assert.throws(() => validate({ ...event, tensors: [withoutNumel] }), /'tensors'\[0\]: missing field 'numel'/);
    assert.throws(() => validate({ type: 'shapes', model: 'm', shapes: { fc: [2, 'x'] } }), /'shapes'\['fc'\]\[1\] must be int/);
  });
  it('checks a reply body against its request', () => {
    assert.deepEqual(validateReply('watch', { layers: ['fc'] }), { layers: ['fc'] });
    assert.throws(() => validateReply('watch', { layers: [3] }), /reply to watch: field 'layers'\[0\] must be str, got int/);
    assert.throws(() => validateReply('setBreakpoints', { resolved: [{ id: 'bp' }] }),
      /reply to setBreakpoints: field 'resolved'\[0\]: missing field 'layers'/);
    assert.throws(() => validateReply('ping', [1]), /the body must be a map/);
  });
  it('refuses a malformed leaf of the nested reply and event shapes, by its path', () => {
    const hook = { model: 'm', module: 'fc', kind: 'forward', owner: 'user', function: 'f' };
    validateReply('listHooks', { hooks: [hook], leaks: [] });
    assert.throws(() => validateReply('listHooks', { hooks: [{ ...hook, line: '3' }], leaks: [] }),
      /reply to listHooks: field 'hooks'\[0\]\.line must be int, got string/);
    const meta = { range: [null, 1.5], grid: { rows: 2, cols: 2 }, of: { tensor: 'output' } };
    const image = { png: new Uint8Array(), width: 1, height: 1 };
    validateReply('render', { ...image, meta });
    assert.throws(() => validateReply('render', { ...image, meta: { ...meta, grid: { rows: 2, cols: 2.5 } } }),
      /field 'meta'\.grid\.cols must be int, got float/);
    assert.throws(() => validateReply('render', { ...image, meta: { ...meta, range: [0, '1'] } }),
      /field 'meta'\.range\[1\] must be float, got string/);
    assert.throws(() => validateReply('getParamGrads', { params: [{ name: 'w', shape: [1], absmax: 0, nan: 0, inf: 0 }] }),
      /reply to getParamGrads: field 'params'\[0\]: missing field 'norm'/);
    const hit = fromJson(valid.find((v) => v.name === 'hitNonFinite')!.message) as { op: Record<string, unknown> };
    assert.throws(() => validate({ ...hit, op: { ...hit.op, stack: [3] } }), /hit: field 'op'\.stack\[0\] must be str, got int/);
  });
});

describe('handshake: shared proof vectors', () => {
  const vectors = JSON.parse(readFileSync(join(vectorsDir, 'handshake.json'), 'utf8')) as
    { token: string; backendNonce: string; editorNonce: string; backendProof: string; editorProof: string }[];
  for (const v of vectors) {
    it(`computes both proofs for token ${JSON.stringify(v.token.slice(0, 8))} like the Python side`, () => {
      const nb = Buffer.from(v.backendNonce, 'hex');
      const ne = Buffer.from(v.editorNonce, 'hex');
      assert.equal(proof(v.token, 'backend', nb, ne).toString('hex'), v.backendProof);
      assert.equal(proof(v.token, 'editor', nb, ne).toString('hex'), v.editorProof);
      assert.ok(proofMatches(Buffer.from(v.editorProof, 'hex'), new Uint8Array(Buffer.from(v.editorProof, 'hex'))));
      // A role's proof is never the other role's: a reflected proof fails.
      assert.ok(!proofMatches(proof(v.token, 'editor', nb, ne), proof(v.token, 'backend', nb, ne)));
      assert.ok(!proofMatches(proof(v.token, 'editor', nb, ne), 'not bytes'));
    });
  }
});
