// The proofs of the Hookscope handshake (mirror of backend/hookscope/link/handshake.py).
//
// Each side proves it holds the session token without sending it: an HMAC-SHA256 keyed by
// the token over a label, the prover's role and both sides' fresh nonces. The shared vectors
// (tests/vectors/handshake.json) keep the two implementations byte-identical.

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { NONCE_BYTES, PROOF_LABEL } from './messages.gen';

export type Role = 'backend' | 'editor';

/** A fresh random challenge. */
export function newNonce(): Buffer {
  return randomBytes(NONCE_BYTES);
}

/** HMAC-SHA256(token, PROOF_LABEL \0 role \0 backendNonce editorNonce). */
export function proof(token: string, role: Role, backendNonce: Uint8Array, editorNonce: Uint8Array): Buffer {
  return createHmac('sha256', Buffer.from(token, 'utf8'))
    .update(Buffer.from(`${PROOF_LABEL}\0${role}\0`, 'ascii'))
    .update(backendNonce)
    .update(editorNonce)
    .digest();
}

/** Constant-time comparison of a received proof with the expected one. */
export function proofMatches(expected: Uint8Array, got: unknown): boolean {
  return got instanceof Uint8Array && got.byteLength === expected.byteLength && timingSafeEqual(expected, got);
}
