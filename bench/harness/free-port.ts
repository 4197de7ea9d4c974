import net from "node:net";

/**
 * `port` if nothing listens on it now (an EADDRINUSE error if something does); with 0, a port the
 * OS picks. Another process could take it before it is used: whatever binds it second then fails
 * loudly (address in use).
 */
export async function freePort(host: string, port = 0): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, resolve);
  });
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (!address || typeof address === "string") throw new Error("the OS gave no port");
  return address.port;
}
