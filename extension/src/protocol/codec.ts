// Framing and msgpack coding of Hookscope protocol messages (mirror of backend/hookscope/link/codec.py).
//
// A frame is a 4-byte big-endian length followed by one msgpack map. Every bound
// is checked before any value is built: the frame length from the header alone,
// then one pass over the msgpack bytes (`scanBody`) that checks nesting depth,
// collection sizes, UTF-8 validity, string-only map keys, extension types and
// truncation. Only a body that passed is handed to @msgpack/msgpack. No `vscode`
// import here: the unit tests and the Node-level integration test use it as is.

import { isUtf8 } from 'node:buffer';
import { Decoder, Encoder } from '@msgpack/msgpack';
import {
  MAX_COLLECTION,
  MAX_DEPTH,
  MAX_FRAME_BYTES,
  ENUM_NAMES,
  MESSAGE_SPECS,
  STRUCT_SPECS,
  type FieldSpec,
  type FieldType,
  type MessageSpec,
} from './messages.gen';

export const HEADER_BYTES = 4;

/** A message that does not follow the protocol; `code` is one of ERROR_CODES and goes into the error reply. */
export class ProtocolError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'ProtocolError';
  }
}

const encoder = new Encoder({ ignoreUndefined: true });

/** msgpack bytes of one message (no header). Strings stay str, Uint8Array becomes bin. */
export function encodeMessage(message: object): Uint8Array {
  return encoder.encode(message);
}

/** One complete frame: header plus body (refused when the body is over `limit`). */
export function frameMessage(message: object, limit = MAX_FRAME_BYTES): Buffer {
  const body = encodeMessage(message);
  if (body.byteLength > limit) {
    throw new ProtocolError('badMessage', `message of ${body.byteLength} bytes exceeds the frame limit of ${limit}`);
  }
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.byteLength);
  out.writeUInt32BE(body.byteLength, 0);
  out.set(body, HEADER_BYTES);
  return out;
}

/** Body length announced by a header; refuses a frame over `limit` before it is read. */
export function frameLength(header: Uint8Array, offset = 0, limit = MAX_FRAME_BYTES): number {
  const length =
    ((header[offset] << 24) >>> 0) + (header[offset + 1] << 16) + (header[offset + 2] << 8) + header[offset + 3];
  if (length > limit) {
    throw new ProtocolError('badMessage', `frame of ${length} bytes exceeds the limit of ${limit}`);
  }
  return length;
}

function strictStringKey(key: unknown): string {
  if (typeof key !== 'string') {
    throw new ProtocolError('badMessage', 'map keys must be strings');
  }
  return key;
}

/** Decode one frame body with bounded sizes and depth. Throws ProtocolError. */
export function decodeBody(body: Uint8Array): unknown {
  if (body.byteLength > MAX_FRAME_BYTES) {
    throw new ProtocolError('badMessage', 'frame exceeds the limit');
  }
  scanBody(body);
  const decoder = new Decoder({
    maxStrLength: body.byteLength,
    maxBinLength: body.byteLength,
    maxArrayLength: Math.min(body.byteLength, MAX_COLLECTION),
    maxMapLength: Math.min(Math.floor(body.byteLength / 2), MAX_COLLECTION),
    maxExtLength: 0,
    mapKeyConverter: strictStringKey,
  });
  try {
    // A plain Uint8Array view, so `bin` values come out as Uint8Array (not Buffer) slices.
    return decoder.decode(new Uint8Array(body.buffer, body.byteOffset, body.byteLength));
  } catch (err) {
    if (err instanceof ProtocolError) throw err;
    throw new ProtocolError('badMessage', `undecodable frame: ${(err as Error).message}`);
  }
}

/**
 * Walks the msgpack encoding without building values. Refuses: truncation, trailing
 * bytes, nesting deeper than MAX_DEPTH, collections over MAX_COLLECTION, non-string
 * map keys, extension types, reserved bytes and invalid UTF-8 in strings.
 */
export function scanBody(body: Uint8Array): void {
  const view = new DataView(body.buffer, body.byteOffset, body.byteLength);
  let pos = 0;
  // Stack of open containers: how many items are still expected, and whether the next item is a map key.
  const remaining: number[] = [];
  const isMap: boolean[] = [];
  const keyNext: boolean[] = [];
  const fail = (why: string): never => {
    throw new ProtocolError('badMessage', `undecodable frame: ${why}`);
  };
  const need = (n: number): void => {
    if (pos + n > body.byteLength) fail('truncated');
  };
  const u8 = (): number => (need(1), view.getUint8(pos++));
  const u16 = (): number => (need(2), (pos += 2), view.getUint16(pos - 2));
  const u32 = (): number => (need(4), (pos += 4), view.getUint32(pos - 4));
  const skip = (n: number): void => {
    need(n);
    pos += n;
  };
  const str = (n: number): void => {
    need(n);
    if (!isUtf8(body.subarray(pos, pos + n))) fail('invalid utf-8 in a string');
    pos += n;
  };
  const open = (count: number, map: boolean): void => {
    if (count > MAX_COLLECTION) fail(`collection of ${count} entries exceeds ${MAX_COLLECTION}`);
    if (count === 0) return;
    remaining.push(map ? count * 2 : count);
    isMap.push(map);
    keyNext.push(map);
  };

  let first = true;
  while (first || remaining.length > 0) {
    first = false;
    const depth = remaining.length;
    // Same rule as codec.py: the root is at depth 1 and every value (scalars too) one below its container.
    if (depth + 1 > MAX_DEPTH) throw new ProtocolError('badMessage', `message nested deeper than ${MAX_DEPTH}`);
    const expectingKey = depth > 0 && isMap[depth - 1] && keyNext[depth - 1];
    if (depth > 0) {
      remaining[depth - 1] -= 1;
      if (isMap[depth - 1]) keyNext[depth - 1] = !keyNext[depth - 1];
    }
    const b = u8();
    const isStr = (b >= 0xa0 && b <= 0xbf) || b === 0xd9 || b === 0xda || b === 0xdb;
    if (expectingKey && !isStr) fail('map keys must be strings');
    if (b <= 0x7f || b >= 0xe0) {
      // positive / negative fixint
    } else if (b <= 0x8f) {
      open(b & 0x0f, true);
    } else if (b <= 0x9f) {
      open(b & 0x0f, false);
    } else if (b <= 0xbf) {
      str(b & 0x1f);
    } else {
      switch (b) {
        case 0xc0: case 0xc2: case 0xc3: break; // nil, false, true
        case 0xc4: skip(u8()); break; // bin 8
        case 0xc5: skip(u16()); break;
        case 0xc6: skip(u32()); break;
        case 0xca: skip(4); break; // float 32
        case 0xcb: skip(8); break;
        case 0xcc: case 0xd0: skip(1); break;
        case 0xcd: case 0xd1: skip(2); break;
        case 0xce: case 0xd2: skip(4); break;
        case 0xcf: case 0xd3: skip(8); break;
        case 0xd9: str(u8()); break;
        case 0xda: str(u16()); break;
        case 0xdb: str(u32()); break;
        case 0xdc: open(u16(), false); break;
        case 0xdd: open(u32(), false); break;
        case 0xde: open(u16(), true); break;
        case 0xdf: open(u32(), true); break;
        case 0xc1: fail('reserved byte 0xc1'); break;
        default: fail('extension types are not allowed'); // 0xc7-0xc9, 0xd4-0xd8
      }
    }
    while (remaining.length > 0 && remaining[remaining.length - 1] === 0) {
      remaining.pop();
      isMap.pop();
      keyNext.pop();
    }
  }
  if (pos !== body.byteLength) fail(`${body.byteLength - pos} extra bytes after the message`);
}

function checkType(value: unknown, type: FieldType): boolean {
  switch (type) {
    case 'any': return true;
    case 'str': return typeof value === 'string';
    case 'int': return typeof value === 'number' ? Number.isInteger(value) : typeof value === 'bigint';
    case 'float': return typeof value === 'number' || typeof value === 'bigint';
    case 'bool': return typeof value === 'boolean';
    case 'bin': return value instanceof Uint8Array;
    case 'list': return Array.isArray(value);
    case 'map': return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
  }
}

function typeName(value: unknown): string {
  if (value === null) return 'nil';
  if (Array.isArray(value)) return 'list';
  if (value instanceof Uint8Array) return 'bin';
  if (typeof value === 'object') return 'map';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  return typeof value;
}

/** Check a decoded message against MESSAGE_SPECS; returns its spec or throws ProtocolError. */
export function validate(message: unknown): MessageSpec & { type: string } {
  if (typeof message !== 'object' || message === null || Array.isArray(message) || message instanceof Uint8Array) {
    throw new ProtocolError('badMessage', `a message must be a map, got ${typeName(message)}`);
  }
  const msg = message as Record<string, unknown>;
  const type = msg.type;
  if (typeof type !== 'string') {
    throw new ProtocolError('badMessage', "a message needs a string 'type'");
  }
  const spec = Object.prototype.hasOwnProperty.call(MESSAGE_SPECS, type) ? MESSAGE_SPECS[type] : undefined;
  if (spec === undefined) {
    throw new ProtocolError('unknownType', `unknown message type ${JSON.stringify(type.slice(0, 64))}`);
  }
  if (spec.kind === 'request' && !checkType(msg.id, 'int')) {
    throw new ProtocolError('badMessage', `request '${type}' needs an integer 'id'`);
  }
  // Requests to the backend: the top level only, as protocol.validate (the engine answers per breakpoint).
  checkFields(type, msg, spec.fields, spec.direction !== 'toBackend');
  return { ...spec, type };
}

/** Check the body of a successful reply to a `requestType` request (mirror of protocol.validate_reply). */
export function validateReply(requestType: string, body: unknown): Record<string, unknown> {
  const where = `reply to ${requestType}`;
  if (!checkType(body, 'map')) throw new ProtocolError('badMessage', `${where}: the body must be a map, got ${typeName(body)}`);
  checkFields(where, body as Record<string, unknown>, MESSAGE_SPECS[requestType]?.reply ?? []);
  return body as Record<string, unknown>;
}

/** Each field present with its type, down to the leaves `of` names; errors name the field's path. */
function checkFields(where: string, msg: Record<string, unknown>, fields: readonly FieldSpec[], deep = true): void {
  for (const field of fields) {
    const value = Object.prototype.hasOwnProperty.call(msg, field.name) ? msg[field.name] : undefined;
    if (value === undefined || value === null) {
      if (field.optional) continue;
      throw new ProtocolError('badMessage', `${where}: missing field '${field.name}' (${field.type})`);
    }
    checkValue(where.includes(':') ? `${where}.${field.name}` : `${where}: field '${field.name}'`, value, field.type, deep ? field.of : undefined);
  }
}

function checkValue(where: string, value: unknown, type: FieldType, of: string | undefined): void {
  if (!checkType(value, type)) throw new ProtocolError('badMessage', `${where} must be ${type}, got ${typeName(value)}`);
  // Enums are types for this side's code; their values are checked where they are used.
  if (of === undefined || type === 'str') return;
  if (type === 'map' && Object.prototype.hasOwnProperty.call(STRUCT_SPECS, of)) {
    checkFields(where.includes(':') ? where : `${where}:`, value as Record<string, unknown>, STRUCT_SPECS[of]);
    return;
  }
  const [itemType, itemOf, nullable] = leaf(of);
  const check = (path: string, item: unknown): void => {
    if (!(nullable && item === null)) checkValue(path, item, itemType, itemOf);
  };
  if (type === 'list') (value as unknown[]).forEach((item, i) => check(`${where}[${i}]`, item));
  else for (const [key, item] of Object.entries(value as Record<string, unknown>)) check(`${where}['${key}']`, item);
}

/** The field type and `of` of one element named by `of` ('int', 'TensorSummary', 'str[]', 'float?'),
 * and whether it may be nil. */
function leaf(of: string): [FieldType, string | undefined, boolean] {
  if (of.endsWith('[]')) return ['list', of.slice(0, -2), false];
  if (Object.prototype.hasOwnProperty.call(STRUCT_SPECS, of)) return ['map', of, false];
  if (ENUM_NAMES.includes(of)) return ['str', of, false];
  const nullable = of.endsWith('?');
  return [(nullable ? of.slice(0, -1) : of) as FieldType, undefined, nullable];
}

/**
 * Incremental frame splitter for a byte stream. `feed` returns the decoded (not yet
 * validated) bodies of every complete frame; a framing or decoding error is thrown
 * as ProtocolError and leaves the stream unusable (the connection must close).
 * `limit` caps each frame from its header, before its body is buffered.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private need: number | undefined;
  /** Largest frame accepted, checked from each header (small until the peer proved the token). */
  limit = MAX_FRAME_BYTES;

  feed(data: Uint8Array): unknown[] {
    this.chunks.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    this.buffered += data.byteLength;
    const out: unknown[] = [];
    for (;;) {
      if (this.need === undefined) {
        if (this.buffered < HEADER_BYTES) break;
        this.need = frameLength(this.take(HEADER_BYTES), 0, this.limit);
      }
      if (this.buffered < this.need) break;
      const body = this.take(this.need);
      this.need = undefined;
      out.push(decodeBody(body));
    }
    return out;
  }

  /** Bytes received but not yet part of a complete frame. */
  get pendingBytes(): number {
    return this.buffered;
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.buffered);
    // Copy: a decoded `bin` may keep a view on these bytes after the stream moves on.
    const head = Buffer.from(all.subarray(0, n));
    const rest = all.subarray(n);
    this.chunks = rest.byteLength > 0 ? [rest] : [];
    this.buffered = rest.byteLength;
    return head;
  }
}
