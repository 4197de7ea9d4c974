/**
 * What `npm start` prints once the gateway answers. The key appears on its own line and nowhere
 * else: the curl example reads it from the shell, so copying the example leaks nothing.
 */
import { API_KEY_VAR, apiKeyLine } from "./api-key.ts";

export interface Running {
  url: string;
  model: string;
  workers: number;
  key: string;
}

/** The curl example, as the README shows it for the default port. */
export function curlExample(url: string, model: string): string {
  const body = JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "Hello!" }] });
  return [
    `curl -N ${url}/v1/chat/completions -H "authorization: Bearer $${API_KEY_VAR}" \\`,
    `  -H 'content-type: application/json' \\`,
    `  -d '${body}'`,
  ].join("\n");
}

export function readyBanner(r: Running): string {
  const indent = (text: string): string => text.replace(/^/gm, "  ");
  return `
kvgate is up on ${r.url}  (model "${r.model}", ${r.workers} simulated GPU workers)
Every /v1 request needs this run's key (npm start makes a new one each time):

${apiKeyLine(r.key)}

Put that line in your shell with \`export\` in front of it, then:

${indent(curlExample(r.url, r.model))}

Ctrl-C stops the gateway and the fleet.`;
}
