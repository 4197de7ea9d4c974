import type * as z from "zod/mini";

/**
 * A check, on an object as it came (before parsing), that refuses a key named "__proto__":
 * parsed into an object (by zod, and by whatever reads it after) it is the prototype's setter, and
 * the entry would be dropped without a word. `what` names an entry in the message.
 */
export function refuseProtoKey(what: string): (value: unknown, ctx: z.core.$RefinementCtx) => void {
  return (value, ctx) => {
    if (typeof value === "object" && value !== null && Object.hasOwn(value, "__proto__")) {
      ctx.issues.push({ code: "custom", message: `is a name no ${what} may have (a JavaScript object's prototype)`, input: value, path: ["__proto__"] });
    }
  };
}
