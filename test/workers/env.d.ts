import type { Env as GatewayEnv } from "../../workers/env.ts";

declare global {
  namespace Cloudflare {
    interface Env extends GatewayEnv {
      KVGATE_MASTER_KEY: string;
      /** The stand-in for a Workers VPC binding (test/support/vpc-stand-in.ts), and the Access service token it wants. */
      GPU_VPC: Fetcher;
      ACCESS_CLIENT_ID: string;
      ACCESS_CLIENT_SECRET: string;
      /** The key the stand-in's keyed server wants as a bearer token (an upstream's apiKeyEnv). */
      GPU_API_KEY: string;
      KVGATE_ADMIN_KEY: string;
      KVGATE_REGISTER_KEY: string;
    }
    interface GlobalProps {
      mainModule: typeof import("../../workers/gateway/index.ts");
      durableNamespaces: "ModelGroup" | "FleetRegistry" | "Tenants";
    }
  }
}
