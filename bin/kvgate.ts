#!/usr/bin/env node
// The kvgate CLI over the gateway's admin API (/admin/v1). `npx kvgate` runs it with the project's Node.
import { main } from "../cli/main.ts";

process.exitCode = await main(process.argv.slice(2), process.env);
