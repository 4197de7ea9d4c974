import type { GroupSettings } from "../../config/schema.ts";

/**
 * Whether the Worker reads this request's usage for routing's feedback: a `sampleRate` share of
 * requests, drawn independently. At 0 (the default) it is one comparison, and no draw. A group the
 * fleet registry saved before the setting existed has none: no sampling.
 */
export function sampledForFeedback(feedback: GroupSettings["feedback"] | undefined, draw: () => number = Math.random): boolean {
  const rate = feedback?.sampleRate ?? 0;
  return rate > 0 && draw() < rate;
}
