import type { Env as GatewayEnv } from "../../workers/env.ts";

declare global {
  namespace Cloudflare {
    interface Env extends GatewayEnv {
      KVGATE_MASTER_KEY: string;
      KVGATE_ADMIN_KEY: string;
      KVGATE_REGISTER_KEY: string;
    }
    interface GlobalProps {
      mainModule: typeof import("../../workers/gateway/index.ts");
      durableNamespaces: "ModelGroup" | "FleetRegistry";
    }
  }
}
