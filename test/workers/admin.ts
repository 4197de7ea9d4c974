import { env } from "cloudflare:workers";
import { expect } from "vitest";
import { gateway } from "./gateway.ts";

/** Calls the admin API (/admin/v1) with the admin key (or `key`), as an operator's tool would. */
export function admin(path: string, init: RequestInit & { json?: unknown } = {}, key: string = env.KVGATE_ADMIN_KEY): Promise<Response> {
  const { json, ...rest } = init;
  const headers = { authorization: `Bearer ${key}`, ...(json === undefined ? {} : { "content-type": "application/json" }) };
  return gateway(path, { ...rest, headers, ...(json === undefined ? {} : { body: JSON.stringify(json) }) });
}

/** The answer's JSON, once its status is `status` (the body is in the failure message when it is not). */
export async function ok<T>(res: Response | Promise<Response>, status = 200): Promise<T> {
  const r = await res;
  const text = await r.text();
  expect(r.status, text).toBe(status);
  return JSON.parse(text) as T;
}

export interface ErrorFields {
  message: string;
  code: string;
  param: string | null;
  type: string;
}

/** The OpenAI-style error of a refused call, once its status is `status`. */
export async function refused(res: Response | Promise<Response>, status: number): Promise<ErrorFields> {
  const r = await res;
  const text = await r.text();
  expect(r.status, text).toBe(status);
  return (JSON.parse(text) as { error: ErrorFields }).error;
}
