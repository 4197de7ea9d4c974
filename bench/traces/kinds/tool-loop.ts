import { kbToBytes, type TraceParams } from "../options.ts";
import { streamFor, type Rng } from "../prng.ts";
import { systemPrompt } from "../prompts.ts";
import type { ChatMessage, Session, ToolCall, Turn } from "../types.ts";
import { identifier, phrase, prose, question, title } from "../words.ts";

/**
 * An agent's tool-calling loop: a system prompt carrying big tool definitions (JSON schemas, as
 * agents paste them), a task, then per turn a tool call and its result, so the context grows by
 * a tool result each turn. The synthetic call stands in for the model's reply, so the server's
 * text reply is not appended.
 */
export const TOOL_LOOP_KEYS = ["toolSchemaKB", "toolResultMinKB", "toolResultMaxKB", "userMinChars", "userMaxChars"] as const;

interface ParamDef {
  name: string;
  type: "string" | "integer" | "boolean";
  choices?: string[];
}

interface ToolDef {
  name: string;
  params: ParamDef[];
}

export function toolLoopSessions(p: TraceParams): Session[] {
  const { text: system, tools } = toolSystemPrompt(streamFor(p.seed, "tools"), kbToBytes(p.toolSchemaKB));
  const sessions: Session[] = [];
  for (let s = 0; s < p.sessions; s++) {
    const rng = streamFor(p.seed, "session", s);
    const task = `Task: ${question(rng, rng.int(p.userMinChars, p.userMaxChars))}`;
    const turns: Turn[] = [];
    for (let t = 0; t < p.turns; t++) {
      const add: ChatMessage[] =
        t === 0
          ? [
              { role: "system", content: system },
              { role: "user", content: task },
            ]
          : toolStep(rng, tools, rng.int(kbToBytes(p.toolResultMinKB), kbToBytes(p.toolResultMaxKB)));
      turns.push({ add, withHistory: true, appendReply: false, maxTokens: p.maxTokens });
    }
    sessions.push({ id: `tool-loop-${s}`, turns });
  }
  return sessions;
}

function toolSystemPrompt(rng: Rng, bytes: number): { text: string; tools: ToolDef[] } {
  const intro = systemPrompt(rng, 320) + "\n\nCall one tool at a time. Available tools:\n";
  const tools: ToolDef[] = [];
  const schemas: unknown[] = [];
  let length = intro.length;
  while (length < bytes || tools.length === 0) {
    const tool = toolDef(rng);
    const schema = JSON.stringify(toolSchema(rng, tool), null, 2);
    tools.push(tool);
    schemas.push(schema);
    length += schema.length + 1;
  }
  return { text: intro + schemas.join("\n"), tools };
}

function toolDef(rng: Rng): ToolDef {
  const params: ParamDef[] = [];
  const count = rng.int(2, 5);
  for (let i = 0; i < count; i++) {
    const type = rng.pick(["string", "string", "integer", "boolean"] as const);
    const choices = type === "string" && rng.chance(0.3) ? [identifier(rng, 1), identifier(rng, 1), identifier(rng, 1)] : undefined;
    params.push(choices ? { name: identifier(rng, 2), type, choices } : { name: identifier(rng, 2), type });
  }
  return { name: identifier(rng), params };
}

/** The OpenAI function-tool shape, with descriptions that make the schema realistically wordy. */
function toolSchema(rng: Rng, tool: ToolDef): unknown {
  const properties: Record<string, unknown> = {};
  for (const param of tool.params) {
    properties[param.name] = {
      type: param.type,
      description: `${title(rng)}: ${phrase(rng, 6, 14)}.`,
      ...(param.choices ? { enum: param.choices } : {}),
    };
  }
  return {
    type: "function",
    function: {
      name: tool.name,
      description: prose(rng, rng.int(80, 200)),
      parameters: { type: "object", properties, required: tool.params.slice(0, 1).map((q) => q.name) },
    },
  };
}

function toolStep(rng: Rng, tools: readonly ToolDef[], resultBytes: number): ChatMessage[] {
  const tool = rng.pick(tools);
  const args: Record<string, string | number | boolean> = {};
  for (const param of tool.params) {
    if (param.choices) args[param.name] = rng.pick(param.choices);
    else if (param.type === "integer") args[param.name] = rng.int(1, 500);
    else if (param.type === "boolean") args[param.name] = rng.chance(0.5);
    else args[param.name] = phrase(rng, 1, 4);
  }
  const call: ToolCall = {
    id: `call_${rng.hex()}${rng.hex()}`,
    type: "function",
    function: { name: tool.name, arguments: JSON.stringify(args) },
  };
  return [
    { role: "assistant", content: "", tool_calls: [call] },
    { role: "tool", tool_call_id: call.id, content: toolResult(rng, resultBytes) },
  ];
}

/** What tools return: search hits as JSON, a file's text, or log lines. */
function toolResult(rng: Rng, bytes: number): string {
  const form = rng.int(0, 2);
  if (form === 1) return prose(rng, bytes);
  const items: string[] = [];
  let length = 0;
  while (length < bytes - 40) {
    const item =
      form === 0
        ? JSON.stringify({ id: rng.hex(), title: title(rng), score: rng.int(1, 999) / 1000, snippet: phrase(rng, 10, 30) })
        : `2025-0${rng.int(1, 9)}-1${rng.int(0, 9)}T${rng.int(10, 23)}:${rng.int(10, 59)}:${rng.int(10, 59)}Z ${rng.pick(["INFO", "INFO", "WARN", "ERROR"])} ${identifier(rng)} ${phrase(rng, 5, 14)}`;
    items.push(item);
    length += item.length + 1;
  }
  return form === 0 ? `{"status":"ok","results":[${items.join(",")}]}` : items.join("\n");
}
