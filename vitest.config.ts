import { randomBytes } from "node:crypto";
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";
import { testConfig, type Upstreams } from "./test/support/test-config.ts";
import { VPC_STAND_IN_SCRIPT } from "./test/support/vpc-stand-in.ts";

// A fresh master key per run: nothing secret is committed, and tests read it from the env.
const masterKey = `sk-test-${randomBytes(16).toString("hex")}`;
// A Cloudflare Access service token, as secrets: the gateway sends it, the private network's stand-in checks it.
const accessToken = { ACCESS_CLIENT_ID: `access-id-${randomBytes(8).toString("hex")}`, ACCESS_CLIENT_SECRET: `access-secret-${randomBytes(16).toString("hex")}` };
// The key a GPU server was started with (vLLM's --api-key), as the secret a deployment's apiKeyEnv names.
const gpuKey = { GPU_API_KEY: `sk-gpu-${randomBytes(16).toString("hex")}` };
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const registerKey = `sk-register-${randomBytes(16).toString("hex")}`;

export default defineConfig({
  test: {
    // A Workers test file whose isolate is blocked never times out: the watchdog bounds it (test/support/hung-file-watchdog.ts).
    reporters: ["default", "./test/support/hung-file-watchdog.ts"],
    projects: [
      {
        // Pure core (src/) and the fleet simulator, in Node.
        test: { name: "unit", include: ["test/unit/**/*.test.ts"], environment: "node" },
      },
      {
        // The gateway in the Workers runtime, against real HTTP upstreams on loopback.
        plugins: [
          cloudflareTest(({ inject }) => ({
            wrangler: { configPath: "./wrangler.toml" },
            miniflare: {
              bindings: {
                KVGATE_CONFIG: JSON.stringify(testConfig(inject("upstreams") as Upstreams)),
                KVGATE_MASTER_KEY: masterKey,
                ...accessToken,
                ...gpuKey,
                KVGATE_ADMIN_KEY: adminKey,
                KVGATE_REGISTER_KEY: registerKey,
              },
              // Workers VPC needs a Cloudflare account: a second Worker stands in for the binding (test/support/vpc-stand-in.ts).
              serviceBindings: { GPU_VPC: "vpc-stand-in" },
              workers: [{ name: "vpc-stand-in", modules: true, script: VPC_STAND_IN_SCRIPT, compatibilityDate: "2026-10-20", bindings: { ...accessToken, ...gpuKey } }],
            },
          })),
        ],
        test: { name: "workers", include: ["test/workers/**/*.test.ts"], globalSetup: ["test/global-setup.ts", "test/support/quiet-workerd.ts"], testTimeout: 15_000 },
      },
      {
        // The bundled gateway in workerd, reached over real sockets: clients that leave, upstreams that misbehave.
        test: { name: "e2e", include: ["test/e2e/**/*.test.ts"], environment: "node", globalSetup: ["test/e2e/global-setup.ts"], testTimeout: 30_000, hookTimeout: 30_000 },
      },
    ],
  },
});
