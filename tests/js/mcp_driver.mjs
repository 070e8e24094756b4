// Drives an MCP server over stdio with the official TypeScript SDK client (`Client` +
// `StdioClientTransport`), one JSON command per stdin line, one JSON answer per stdout line.
//
// argv[2] is a JSON object: {"command", "args", "env", "cwd", "elicit"}. `elicit` is null (the client
// declares no elicitation capability) or the form content the client accepts with (e.g.
// {"decision": "allow_once"}); every elicitation request it receives is reported as an event.
//
// Commands (each with an "id" echoed in its answer; calls run concurrently):
//   {"op": "list"}                                       -> {"tools": [...]}
//   {"op": "call", "name", "arguments", "progress"}      -> {"result": CallToolResult, "progress": [...]}
//                                                           or {"error": {"name", "code", "message"}}
//   {"op": "cancel", "target": <id of a running call>}   -> {"cancelled": true|false}
//   {"op": "request", "method", "params"}                -> {"result": ...} or {"error": ...}, through the
//        SDK's typed method for prompts/list|get, resources/list|read|subscribe|templates/list,
//        logging/setLevel, completion/complete
// Resource updates and log messages the server sends are reported as events ("resource_updated", "log").
//   {"op": "close"}                                      -> {"closed": true}, then the driver exits
// The SDK's own checks run as for any application: results are validated against the tool's
// outputSchema (listed first), and an invalid one is reported as an error, not a result.

import readline from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  ElicitRequestSchema, LoggingMessageNotificationSchema, ResourceUpdatedNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const config = JSON.parse(process.argv[2]);
const send = (message) => process.stdout.write(JSON.stringify(message) + "\n");

const capabilities = config.elicit ? { elicitation: { form: {} } } : {};
const client = new Client({ name: "peon-ts-test-client", version: "1.0.0" }, { capabilities });
if (config.elicit) {
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    send({ event: "elicitation", params: request.params });
    return { action: "accept", content: config.elicit };
  });
}

client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (note) => {
  send({ event: "resource_updated", params: note.params });
});
client.setNotificationHandler(LoggingMessageNotificationSchema, async (note) => {
  send({ event: "log", params: note.params });
});

const requests = {
  "prompts/list": (params) => client.listPrompts(params),
  "prompts/get": (params) => client.getPrompt(params),
  "resources/list": (params) => client.listResources(params),
  "resources/templates/list": (params) => client.listResourceTemplates(params),
  "resources/read": (params) => client.readResource(params),
  "resources/subscribe": (params) => client.subscribeResource(params),
  "logging/setLevel": (params) => client.setLoggingLevel(params.level),
  "completion/complete": (params) => client.complete(params),
};

const transport = new StdioClientTransport({
  command: config.command, args: config.args, env: config.env, cwd: config.cwd, stderr: "inherit",
});

function describe(error) {
  return { name: error?.name ?? "Error", code: error?.code ?? null, message: String(error?.message ?? error) };
}

const running = new Map(); // id -> AbortController

async function handle(command) {
  const { id, op } = command;
  try {
    if (op === "list") {
      const listed = await client.listTools();
      return { id, tools: listed.tools, nextCursor: listed.nextCursor ?? null };
    }
    if (op === "call") {
      const controller = new AbortController();
      running.set(id, controller);
      const progress = [];
      const options = { signal: controller.signal, timeout: command.timeoutMs ?? 60000 };
      if (command.progress) {
        options.onprogress = (update) => progress.push(update);
      }
      try {
        const result = await client.callTool({ name: command.name, arguments: command.arguments }, undefined, options);
        return { id, result, progress };
      } catch (error) {
        return { id, error: describe(error), progress };
      } finally {
        running.delete(id);
      }
    }
    if (op === "request") {
      const run = requests[command.method];
      if (!run) return { id, error: { name: "DriverError", code: null, message: `no typed method for ${command.method}` } };
      return { id, result: await run(command.params ?? {}) };
    }
    if (op === "cancel") {
      const controller = running.get(command.target);
      controller?.abort("cancelled by the test");
      return { id, cancelled: Boolean(controller) };
    }
    if (op === "close") {
      await client.close();
      return { id, closed: true };
    }
    return { id, error: { name: "DriverError", code: null, message: `unknown op ${op}` } };
  } catch (error) {
    return { id, error: describe(error) };
  }
}

try {
  await client.connect(transport);
} catch (error) {
  send({ ready: false, error: describe(error) });
  process.exit(1);
}
send({ ready: true, server: client.getServerVersion(), capabilities: client.getServerCapabilities() });

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  handle(command).then((answer) => {
    send(answer);
    if (command.op === "close") process.exit(0);
  });
}
await client.close();
