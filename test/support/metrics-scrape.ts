/** `GET /metrics` of the gateway at `url`, scraped with `adminKey`; throws unless it answers 200. */
export async function metricsText(url: string, adminKey: string): Promise<string> {
  const res = await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${adminKey}` } });
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}`);
  return res.text();
}

/** The value of the sample `name{labels}` (labels in the order the gateway writes them), or null. */
export function sample(text: string, name: string, labels: string): number | null {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}} `));
  return line === undefined ? null : Number(line.slice(line.lastIndexOf(" ") + 1));
}

/** The sum of the samples named `name` (exactly: no _bucket, _sum or _count) whose labels include every one of `labels`. */
export function sampleSum(text: string, name: string, labels: Record<string, string>): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let n = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const labelText = line.slice(name.length + 1, line.lastIndexOf("} "));
    const have = new Set(labelText.split(/,(?=[a-z_]+=")/));
    if (wanted.every((w) => have.has(w))) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return n;
}
