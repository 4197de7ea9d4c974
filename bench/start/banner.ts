/**
 * What `npm start` prints once the gateway answers. Each key appears on its own line and nowhere
 * else: the curl example reads the client key from the shell, so copying the example leaks nothing.
 */
import { DEFAULT_URL as CLI_DEFAULT_URL } from "../../cli/admin-client.ts";
import { KEY_VARS, keyLine, type DevKeys } from "./api-key.ts";

export interface Running {
  url: string;
  model: string;
  workers: number;
  keys: DevKeys;
}

/** The curl example, as the README shows it for the default port. */
export function curlExample(url: string, model: string): string {
  const body = JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "Hello!" }] });
  return [
    `curl -N ${url}/v1/chat/completions -H "authorization: Bearer $${KEY_VARS.api}" \\`,
    `  -H 'content-type: application/json' \\`,
    `  -d '${body}'`,
  ].join("\n");
}

export function readyBanner(r: Running): string {
  const indent = (text: string): string => text.replace(/^/gm, "  ");
  return `
kvgate is up on ${r.url}  (model "${r.model}", ${r.workers} simulated GPU workers)
Every /v1 request needs this run's key (npm start makes new keys each time):

${keyLine("api", r.keys.api)}

Put that line in your shell with \`export\` in front of it, then:

${indent(curlExample(r.url, r.model))}

The admin API (npx kvgate) takes the admin key; GPU servers that register themselves, the register key:

${keyLine("admin", r.keys.admin)}
${keyLine("register", r.keys.register)}
${r.url === CLI_DEFAULT_URL ? "" : `\nnpx kvgate looks for ${CLI_DEFAULT_URL}; export this line too:\n\nKVGATE_URL=${r.url}\n`}
In a browser: ${r.url}/playground/ (chat, with the API key) and ${r.url}/dashboard/ (the fleet live, with the admin key).

Ctrl-C stops the gateway and the fleet.`;
}
