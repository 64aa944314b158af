// Fuzzing the TypeScript decoder (extension/src/protocol/codec.ts) with a seeded random/mutation fuzzer.
//
// fast-check is not a dependency, so the generators live here: a seeded PRNG (reproducible:
// a failure prints its seed and input), random byte strings, valid frames from the shared
// vectors and from random values mutated at the byte level (flips, truncation, inserted
// headers, huge length prefixes), and protocol-shaped messages with fields of random types.
// The only exception allowed out of decodeBody / FrameReader.feed / validate is ProtocolError,
// and each input must finish within a time bound (a hang fails the test, not the suite).

import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { FrameReader, ProtocolError, decodeBody, encodeMessage, frameMessage, validate } from '../../extension/src/protocol/codec';
import { ERROR_CODES, MESSAGE_SPECS, type FieldType } from '../../extension/src/protocol/messages.gen';

const SEED = Number(process.env.HOOKSCOPE_FUZZ_SEED ?? 20240611);
const RUNS = Number(process.env.HOOKSCOPE_FUZZ_RUNS ?? 3000);
const PER_INPUT_MS = 2000;

/** mulberry32: small, fast, good enough for test inputs. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Gen {
  constructor(readonly next: () => number) {}
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }
  bytes(max: number): Uint8Array {
    const out = new Uint8Array(this.int(0, max));
    for (let i = 0; i < out.length; i++) out[i] = this.int(0, 255);
    return out;
  }
  scalar(): unknown {
    switch (this.int(0, 8)) {
      case 0: return null;
      case 1: return this.next() < 0.5;
      case 2: return this.int(-1e6, 1e6);
      case 3: return this.pick([0, -1, 2 ** 31, 2 ** 32, 2 ** 53 - 1, -(2 ** 53), 1.5, NaN, Infinity, -Infinity]);
      case 4: return this.next() * 1e9 - 5e8;
      case 5: return String.fromCharCode(...Array.from({ length: this.int(0, 12) }, () => this.int(0, 0xd7ff)));
      case 6: return this.bytes(16);
      case 7: return this.pick(['', 'type', 'hello', 'reply', '\u{1F600}', 'a'.repeat(100)]);
      default: return BigInt(this.int(0, 1e9)) * 1000000000000n;
    }
  }
  value(depth = 0): unknown {
    const k = this.int(0, depth > 4 ? 0 : 3);
    if (k <= 1) return this.scalar();
    if (k === 2) return Array.from({ length: this.int(0, 4) }, () => this.value(depth + 1));
    const obj: Record<string, unknown> = {};
    for (let i = this.int(0, 4); i > 0; i--) obj[String(this.scalar())] = this.value(depth + 1);
    return obj;
  }
  typed(type: FieldType): unknown {
    if (this.next() < 0.25) return this.value(); // often the wrong type on purpose
    switch (type) {
      case 'str': return String(this.scalar());
      case 'int': return this.int(-3, 1e6);
      case 'float': return this.next() * 100;
      case 'bool': return this.next() < 0.5;
      case 'bin': return this.bytes(8);
      case 'list': return Array.from({ length: this.int(0, 3) }, () => this.value(2));
      case 'map': return { a: this.value(2) };
      default: return this.value();
    }
  }
}

function encodeSafe(value: unknown): Uint8Array {
  try {
    return encodeMessage(value as object);
  } catch {
    return new Uint8Array([0xc0]);
  }
}

/** Runs `fn` and fails on anything but ProtocolError (with a valid code) or a slow input. */
function expectOnlyProtocolErrors(fn: () => void, input: Uint8Array, seed: number, index: number): void {
  const start = Date.now();
  try {
    fn();
  } catch (err) {
    if (!(err instanceof ProtocolError)) {
      assert.fail(`seed ${seed} input #${index} (${Buffer.from(input).toString('hex').slice(0, 400)}) threw ` +
        `${(err as Error)?.name}: ${(err as Error)?.message}`);
    }
    assert.ok((ERROR_CODES as readonly string[]).includes(err.code), `unknown error code ${err.code}`);
  }
  assert.ok(Date.now() - start < PER_INPUT_MS, `seed ${seed} input #${index} took ${Date.now() - start} ms`);
}

function decodeAndValidate(body: Uint8Array): void {
  const value = decodeBody(body);
  validate(value);
}

const readVectors = (name: string) => JSON.parse(readFileSync(join(__dirname, '..', 'vectors', name), 'utf8')) as { hex: string }[];
const vectors = [...readVectors('valid.json'), ...readVectors('invalid.json')];

describe('fuzz: TypeScript decoder and validator', function () {
  this.timeout(120000);

  it('random bytes decode or fail with ProtocolError', () => {
    const g = new Gen(prng(SEED));
    for (let i = 0; i < RUNS; i++) {
      const input = g.bytes(256);
      expectOnlyProtocolErrors(() => decodeAndValidate(input), input, SEED, i);
    }
  });

  it('mutated valid encodings (vectors and random values) decode or fail with ProtocolError', () => {
    const g = new Gen(prng(SEED + 1));
    const seeds = vectors.map((v) => new Uint8Array(Buffer.from(v.hex, 'hex')));
    for (let i = 0; i < RUNS; i++) {
      const base = g.next() < 0.5 ? g.pick(seeds) : encodeSafe(g.value());
      const input = Uint8Array.from(base);
      let data: Uint8Array = input;
      switch (g.int(0, 4)) {
        case 0: for (let f = g.int(1, 4); f > 0 && data.length; f--) data[g.int(0, data.length - 1)] = g.int(0, 255); break;
        case 1: data = data.subarray(0, g.int(0, data.length)); break;
        case 2: { // a huge container or string length in the middle
          const pos = g.int(0, data.length);
          const head = g.pick([0xdc, 0xdd, 0xde, 0xdf, 0xc6, 0xdb]);
          const big = head === 0xdc || head === 0xde ? [0xff, 0xff] : [0xff, 0xff, 0xff, g.int(0, 255)];
          data = Uint8Array.from([...data.subarray(0, pos), head, ...big, ...data.subarray(pos)]);
          break;
        }
        case 3: data = Uint8Array.from([...data, ...g.bytes(8)]); break;
        default: data = Uint8Array.from([...new Array<number>(g.int(1, 40)).fill(g.pick([0x91, 0x81, 0xdc])), ...data]);
      }
      expectOnlyProtocolErrors(() => decodeAndValidate(data), data, SEED + 1, i);
    }
  });

  it('protocol-shaped messages with fields of random types validate or fail with ProtocolError', () => {
    const g = new Gen(prng(SEED + 2));
    const types = Object.keys(MESSAGE_SPECS);
    let accepted = 0;
    for (let i = 0; i < RUNS; i++) {
      const type = g.next() < 0.95 ? g.pick(types) : String(g.scalar());
      const spec = MESSAGE_SPECS[type];
      const message: Record<string, unknown> = { type };
      if (spec?.kind === 'request') message.id = g.next() < 0.8 ? g.int(0, 1000) : g.scalar();
      for (const field of spec?.fields ?? []) {
        if (field.optional && g.next() < 0.4) continue;
        message[field.name] = g.typed(field.type);
      }
      const body = encodeSafe(message);
      expectOnlyProtocolErrors(() => {
        decodeAndValidate(body);
        accepted++;
      }, body, SEED + 2, i);
    }
    assert.ok(accepted > RUNS / 20, `the generator should also produce valid messages (${accepted})`);
  });

  it('random streams through FrameReader (split anywhere, huge headers) fail only with ProtocolError', () => {
    const g = new Gen(prng(SEED + 3));
    for (let i = 0; i < RUNS / 3; i++) {
      const reader = new FrameReader();
      const parts: Uint8Array[] = [];
      for (let n = g.int(1, 4); n > 0; n--) {
        const r = g.next();
        if (r < 0.4) parts.push(frameMessage({ type: 'ping', id: g.int(0, 9) }));
        else if (r < 0.6) {
          const header = Buffer.alloc(4);
          header.writeUInt32BE(g.pick([0, 1, 0x7fffffff, 0xffffffff, g.int(0, 64)]));
          parts.push(header);
        } else parts.push(g.bytes(64));
      }
      const stream = Buffer.concat(parts);
      expectOnlyProtocolErrors(() => {
        let pos = 0;
        while (pos < stream.length) {
          const step = g.int(1, 9);
          for (const value of reader.feed(stream.subarray(pos, pos + step))) {
            try {
              validate(value);
            } catch (err) {
              if (!(err instanceof ProtocolError)) throw err;
            }
          }
          pos += step;
        }
      }, stream, SEED + 3, i);
      assert.ok(reader.pendingBytes <= stream.length);
    }
  });
});
