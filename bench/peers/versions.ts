import { resolve } from "node:path";

/**
 * The peer gateways measured beside kvgate, pinned exactly: a loose range let a minor bump of
 * Portkey's server adapter break its streaming for months (see bench/results/overhead.md, Peers).
 */
export const PORTKEY_VERSION = "1.15.2";
/** Portkey streams answer 500 ("TypeError: immutable") with newer adapters: its issue #1389. */
export const HONO_NODE_SERVER_VERSION = "1.13.5";
/**
 * The newest 1.106.x whose dependencies resolve from the package index here: 1.106.3 and later
 * require certifi >= 2026.10.19, which the index does not have yet.
 */
export const LITELLM_VERSION = "1.106.2";
/** SGLang's router (the Rust model gateway in a Python wheel): the version the table measured. */
export const SGLANG_ROUTER_VERSION = "0.3.2";

const BENCH = resolve(import.meta.dirname, "..");
/** Git-ignored install folders. */
export const PEERS_DIR = resolve(BENCH, ".peers");
export const VENV_DIR = resolve(BENCH, ".venv");
