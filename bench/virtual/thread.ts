import { parentPort } from "node:worker_threads";
import { runVirtualPoint, type VirtualPoint } from "./point.ts";

/** One of bench:routing-virtual's threads: runs each point it is sent and posts back its figures. */
parentPort?.on("message", (p: VirtualPoint) => {
  parentPort?.postMessage(runVirtualPoint(p));
});
