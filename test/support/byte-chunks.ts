import { connect } from "node:net";

/**
 * POSTs `body` on a raw socket as one HTTP chunk per byte (`1\r\nX\r\n`), as no client library
 * sends it: a runtime hands each chunk over as a read of its own. Resolves with the raw answer
 * (status line, headers and body), read until the gateway closes the connection.
 */
export function postByteChunks(url: string, path: string, key: string, body: Buffer): Promise<string> {
  const frames = Buffer.alloc(body.length * 6);
  for (let i = 0; i < body.length; i++) frames.write(`1\r\n${String.fromCharCode(body[i] as number)}\r\n`, i * 6, "latin1");
  const { hostname, port } = new URL(url);
  const head = `POST ${path} HTTP/1.1\r\nhost: ${hostname}:${port}\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n`;
  return new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), hostname, () => socket.end(Buffer.concat([Buffer.from(head), frames, Buffer.from("0\r\n\r\n")])));
    const got: Buffer[] = [];
    socket.on("data", (d: Buffer) => got.push(d));
    socket.on("end", () => resolve(Buffer.concat(got).toString("latin1")));
    socket.on("error", reject);
  });
}
