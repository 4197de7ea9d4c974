import { KEY_DEFAULTS, type KeyFields } from "./key-input.ts";
import type { KeyRecord } from "./protocol.ts";

export const KEY_STATUSES = ["active", "revoked", "expired"] as const;
export type KeyStatus = (typeof KEY_STATUSES)[number];

/**
 * How long an isolate acts on a key as it last read it from the tenants object: a revocation, a
 * rotation or a changed limit takes effect in every isolate within this (plus the read itself).
 */
export const KEY_RECORD_MAX_AGE_MS = 10_000;

/** Whether the key may be used at `now`: a revocation outranks an expiry. */
export function keyStatus(record: KeyRecord, now: number): KeyStatus {
  if (record.revokedAt !== null) return "revoked";
  if (record.expiresAt !== null && record.expiresAt <= now) return "expired";
  return "active";
}

/** A key's id: random, so nothing of the key can be read from it, and kept across rotations. */
export function newKeyId(): string {
  let hex = "";
  for (const b of crypto.getRandomValues(new Uint8Array(8))) hex += b.toString(16).padStart(2, "0");
  return `key_${hex}`;
}

export function newRecord(fields: KeyFields, id: string, prefix: string, now: number): KeyRecord {
  return { ...KEY_DEFAULTS, ...fields, id, prefix, createdAt: now, revokedAt: null };
}

export function patchedRecord(record: KeyRecord, fields: KeyFields): KeyRecord {
  return { ...record, ...fields };
}
