// Drives MCP tasks (2025-11-25, experimental) on an MCP server over stdio with the official TypeScript SDK
// client's own task API (`client.experimental.tasks`): one scenario, one JSON report on stdout.
//
// argv[2] is a JSON object: {"command", "args", "env", "cwd", "pidFile"}.
//   1. callToolStream of `sleep 3; echo done` with a task: the messages it yields, in order;
//   2. callToolStream of a command that writes its pid to pidFile and sleeps: once the file exists,
//      cancelTask, then getTask — the pid, the cancel's answer and the task's status after it;
//   3. listTasks.

import fs from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const config = JSON.parse(process.argv[2]);
const client = new Client({ name: "peon-ts-tasks-client", version: "1.0.0" }, { capabilities: {} });
const transport = new StdioClientTransport({
  command: config.command, args: config.args, env: config.env, cwd: config.cwd, stderr: "inherit",
});
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const report = { capabilities: null, first: [], cancel: null, list: null };
try {
  await client.connect(transport);
  report.capabilities = client.getServerCapabilities();
  await client.listTools();
  for await (const message of client.experimental.tasks.callToolStream(
    { name: "bash", arguments: { command: "sleep 3; echo done" } }, undefined, { task: { ttl: 60000 } })) {
    report.first.push(message.type === "error" ? { type: "error", message: String(message.error) }
      : message.type === "result" ? { type: "result", result: message.result }
      : { type: message.type, status: message.task.status, taskId: message.task.taskId });
  }
  const stream = client.experimental.tasks.callToolStream(
    { name: "bash", arguments: { command: `echo $$ > ${config.pidFile}; exec sleep 300` } }, undefined,
    { task: {} });
  const created = (await stream.next()).value;
  let pid = null;
  for (let i = 0; i < 300 && pid === null; i++) {
    try { pid = parseInt(fs.readFileSync(config.pidFile, "utf8"), 10) || null; } catch { await sleep(100); }
  }
  const cancelled = await client.experimental.tasks.cancelTask(created.task.taskId);
  let after = null;
  for (let i = 0; i < 150; i++) {
    after = await client.experimental.tasks.getTask(created.task.taskId);
    if (after.status !== "working") break;
    await sleep(100);
  }
  await stream.return();
  report.cancel = { pid, created: created.type, answer: cancelled.status, after: after.status };
  report.list = (await client.experimental.tasks.listTasks()).tasks.map((task) => task.status);
} catch (error) {
  report.failure = String(error && error.stack || error);
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
