import * as z from "zod/mini";
import { EXACT_ORIGIN, isExactOrigin } from "../origin.ts";
import { firstIssue } from "../zod-issues.ts";
import { instantOf } from "./instant.ts";
import type { BudgetPeriod, KeyLimits, KeyRecord, TenantsRefusal } from "./protocol.ts";
import { refuseProtoKey } from "../proto-key.ts";

/**
 * A key's settings as the admin API takes them (snake_case JSON): one schema for create and for
 * update. Every field is optional; on create a missing one takes its default, on update it stays
 * as it is, and null clears a limit.
 */

const positiveInt = () => z.nullable(z.number().check(z.int(), z.minimum(1)));
const METADATA = { maxEntries: 16, maxValue: 256 } as const;
const METADATA_LABEL = /^[A-Za-z0-9_.:-]{1,64}$/;

const LabelsSchema = z.pipe(
  z.unknown().check(z.superRefine(refuseProtoKey("label"))),
  // An object with a catch-all rather than z.record, which adds a few KiB of zod to the Worker bundle.
  z.catchall(z.object({}), z.string().check(z.maxLength(METADATA.maxValue))).check(
    z.superRefine((labels, ctx) => {
      const names = Object.keys(labels);
      if (names.length > METADATA.maxEntries) ctx.issues.push({ code: "custom", message: `must have at most ${METADATA.maxEntries} entries`, input: labels });
      for (const name of names) {
        if (!METADATA_LABEL.test(name)) ctx.issues.push({ code: "custom", message: "must be named with 1 to 64 letters, digits, _ . : or -", input: name, path: [name] });
      }
    }),
  ),
);

const KeyInputSchema = z.strictObject({
  name: z.optional(z.nullable(z.string().check(z.minLength(1), z.maxLength(128)))),
  models: z.optional(z.array(z.string().check(z.minLength(1), z.maxLength(256))).check(z.maxLength(256))),
  rpm: z.optional(positiveInt()),
  tpm: z.optional(positiveInt()),
  max_parallel: z.optional(positiveInt()),
  budget_tokens: z.optional(positiveInt()),
  budget_usd: z.optional(z.nullable(z.number().check(z.gt(0), z.maximum(1e9)))),
  budget_period: z.optional(z.enum(["day", "month", "total"])),
  origins: z.optional(z.array(z.string().check(z.refine(isExactOrigin, EXACT_ORIGIN))).check(z.maxLength(64))),
  expires_at: z.optional(z.nullable(z.string().check(z.refine((t) => instantOf(t) !== null, "must be an ISO 8601 timestamp with its zone (2027-01-31T00:00:00Z) or a day (2027-01-31)")))),
  metadata: z.optional(LabelsSchema),
  track_usage: z.optional(z.boolean()),
});

type KeyInput = z.output<typeof KeyInputSchema>;

/** What a create or update sets, by the record's own field names. */
export type KeyFields = Partial<KeyLimits & Pick<KeyRecord, "name" | "metadata" | "expiresAt">>;

export const KEY_DEFAULTS: KeyLimits & Pick<KeyRecord, "name" | "metadata" | "expiresAt"> = {
  models: [],
  rpm: null,
  tpm: null,
  maxParallel: null,
  budgetTokens: null,
  budgetUsd: null,
  budgetPeriod: "month",
  origins: [],
  trackUsage: true,
  name: null,
  metadata: {},
  expiresAt: null,
};

const refusal = (message: string, param: string | null): TenantsRefusal => ({ ok: false, status: 400, code: "invalid_value", message, param });

/**
 * Checks a create (`patch` false) or update body; `now` for the expiry, which must be later. An
 * update must name at least one field.
 */
export function parseKeyInput(input: unknown, now: number, patch: boolean): { ok: true; fields: KeyFields } | TenantsRefusal {
  const r = KeyInputSchema.safeParse(input);
  if (!r.success) {
    const issue = r.error.issues[0];
    if (issue?.code === "unrecognized_keys") {
      const field = issue.keys[0] ?? "";
      return refusal(`unknown field "${field}"; a key takes ${Object.keys(KeyInputSchema.shape).join(", ")}`, field);
    }
    const { param, message } = firstIssue(r.error.issues);
    return refusal(message, param || null);
  }
  const fields = toFields(r.data);
  if (patch && Object.keys(fields).length === 0) return refusal("the update names no field to change", null);
  if (fields.expiresAt != null && fields.expiresAt <= now) return refusal("expires_at must be in the future", "expires_at");
  return { ok: true, fields };
}

function toFields(i: KeyInput): KeyFields {
  const f: KeyFields = {};
  if (i.name !== undefined) f.name = i.name;
  if (i.models !== undefined) f.models = [...new Set(i.models)];
  if (i.rpm !== undefined) f.rpm = i.rpm;
  if (i.tpm !== undefined) f.tpm = i.tpm;
  if (i.max_parallel !== undefined) f.maxParallel = i.max_parallel;
  if (i.budget_tokens !== undefined) f.budgetTokens = i.budget_tokens;
  if (i.budget_usd !== undefined) f.budgetUsd = i.budget_usd;
  if (i.budget_period !== undefined) f.budgetPeriod = i.budget_period satisfies BudgetPeriod;
  if (i.origins !== undefined) f.origins = [...new Set(i.origins)];
  if (i.expires_at !== undefined) f.expiresAt = i.expires_at === null ? null : instantOf(i.expires_at);
  if (i.metadata !== undefined) f.metadata = { ...i.metadata };
  if (i.track_usage !== undefined) f.trackUsage = i.track_usage;
  return f;
}
