// The official ACP TypeScript SDK (2.x) spawns `modefsm serve` and runs the seed scenario of
// the ACP "Session Modes" page: a new session, set_mode, the mode config option, an approved
// switch, a rejected one, an unknown mode. Every frame the agent writes is validated with the
// SDK's own zod schemas, and must keep every key and item through them (the schemas drop bad
// list items and unknown keys silently, so "parses" alone would miss a malformed message).
//
// Usage: node seed_scenario.mjs COMMAND [ARGS...]   (the agent command, e.g. python -m modefsm serve)
// Prints one JSON summary line on success; exits 1 with the reason otherwise.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable } from "node:stream";

import * as acp from "@agentclientprotocol/sdk";
// The generated zod schemas the SDK validates with (not exported by name, so by path).
import * as z from "./node_modules/@agentclientprotocol/sdk/dist/v1/schema/zod.gen.js";

const [command, ...args] = process.argv.slice(2);
if (!command) {
  console.error("usage: node seed_scenario.mjs COMMAND [ARGS...]");
  process.exit(2);
}

const RESPONSE_SCHEMAS = {
  initialize: z.zInitializeResponse,
  "session/new": z.zNewSessionResponse,
  "session/load": z.zLoadSessionResponse,
  "session/set_mode": z.zSetSessionModeResponse,
  "session/set_config_option": z.zSetSessionConfigOptionResponse,
  "session/prompt": z.zPromptResponse,
};
const REQUEST_SCHEMAS = { "session/request_permission": z.zRequestPermissionRequest };
const NOTIFICATION_SCHEMAS = { "session/update": z.zSessionNotification };

// -- what went over the wire, both ways, in order -----------------------------------------
const frames = []; // {dir: "in" | "out", message}
const sentMethods = new Map(); // our request id -> method
const problems = [];
let validated = 0;

// Whether `parsed` keeps everything in `raw`: the same scalars, every key, every list item.
// The schemas may add defaults (absent capabilities become false); they must not drop
// anything (a list item they could not read, a key they do not know).
function keeps(parsed, raw) {
  if (Array.isArray(raw)) {
    return Array.isArray(parsed) && parsed.length === raw.length && raw.every((item, i) => keeps(parsed[i], item));
  }
  if (raw && typeof raw === "object") {
    return (
      parsed !== null &&
      typeof parsed === "object" &&
      Object.keys(raw).every((key) => key in parsed && keeps(parsed[key], raw[key]))
    );
  }
  return Object.is(parsed, raw);
}

function validate(schema, value, what) {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    problems.push(`${what}: rejected by the SDK schema: ${parsed.error.message}`);
    return;
  }
  if (!keeps(parsed.data, value)) {
    problems.push(`${what}: changed by the SDK schema (a dropped item or unknown key): ${JSON.stringify(value)}`);
    return;
  }
  validated += 1;
}

function check(message) {
  if (message.jsonrpc !== "2.0") problems.push(`not JSON-RPC 2.0: ${JSON.stringify(message)}`);
  if ("method" in message) {
    const schemas = "id" in message ? REQUEST_SCHEMAS : NOTIFICATION_SCHEMAS;
    const schema = schemas[message.method];
    if (!schema) problems.push(`unexpected ${message.method} from the agent`);
    else validate(schema, message.params, message.method);
  } else if ("error" in message) {
    validate(z.zError, message.error, `error answering ${sentMethods.get(message.id)}`);
  } else {
    const method = sentMethods.get(message.id);
    const schema = RESPONSE_SCHEMAS[method];
    if (!schema) problems.push(`a response to an unknown request: ${JSON.stringify(message)}`);
    else validate(schema, message.result, `${method} result`);
  }
}

function lineSplitter(onLine) {
  const decoder = new TextDecoder();
  let pending = "";
  return (chunk) => {
    pending += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, newline).trim();
      pending = pending.slice(newline + 1);
      if (line) onLine(JSON.parse(line));
    }
  };
}

// -- the agent process, with both pipes tapped ---------------------------------------------
const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));

const tapOut = lineSplitter((message) => {
  frames.push({ dir: "out", message });
  if ("method" in message && "id" in message) sentMethods.set(message.id, message.method);
});
const output = new WritableStream({
  write(chunk) {
    tapOut(chunk);
    return new Promise((resolve, reject) => child.stdin.write(chunk, (e) => (e ? reject(e) : resolve())));
  },
  close() {
    child.stdin.end();
  },
});
const [forSdk, forCheck] = Readable.toWeb(child.stdout).tee();
const tapIn = lineSplitter((message) => {
  frames.push({ dir: "in", message });
  check(message);
});
const tapped = (async () => {
  for await (const chunk of forCheck) tapIn(chunk);
})();

// -- the client ------------------------------------------------------------------------------
const updates = []; // session/update params, in the order the SDK delivered them
let answer = "code"; // the option the next permission request gets
const asked = [];

const app = acp
  .client({ name: "modefsm-ts-e2e" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    asked.push(params);
    return { outcome: { outcome: "selected", optionId: answer } };
  });

function modeUpdates(sessionId) {
  return frames
    .filter((f) => f.dir === "in" && f.message.method === "session/update")
    .map((f) => f.message.params)
    .filter((p) => p.sessionId === sessionId && p.update.sessionUpdate === "current_mode_update")
    .map((p) => p.update.currentModeId);
}

function assertAnnouncedBeforeResponse(method, mode) {
  // the last response to `method` comes after a current_mode_update and a
  // config_option_update (complete list) announcing `mode`
  const incoming = frames.filter((f) => f.dir === "in").map((f) => f.message);
  const last = incoming.findLastIndex((m) => !("method" in m) && sentMethods.get(m.id) === method);
  assert.ok(last > 0, `no response to ${method}`);
  const before = incoming.slice(0, last).filter((m) => m.method === "session/update").map((m) => m.params.update);
  const current = before.findLast((u) => u.sessionUpdate === "current_mode_update");
  const option = before.findLast((u) => u.sessionUpdate === "config_option_update");
  assert.equal(current?.currentModeId, mode, `${method}: current_mode_update ${mode} before the response`);
  assert.equal(option?.configOptions?.[0]?.currentValue, mode, `${method}: config_option_update before the response`);
  assert.equal(option.configOptions[0].options.length, 3, "the complete option list");
}

const steps = [];
try {
  await app.connectWith(acp.ndJsonStream(output, forSdk), async (ctx) => {
    const init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
    });
    assert.equal(init.agentCapabilities.loadSession, true);
    steps.push("initialize");

    const created = await ctx.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
    const sessionId = created.sessionId;
    assert.equal(created.modes.currentModeId, "ask");
    assert.deepEqual(created.modes.availableModes.map((m) => m.id), ["ask", "architect", "code"]);
    assert.equal(created.configOptions[0].currentValue, "ask");
    assert.equal(created.configOptions[0].category, "mode");
    steps.push("session/new");

    assert.deepEqual(await ctx.request(acp.methods.agent.session.setMode, { sessionId, modeId: "architect" }), {});
    assertAnnouncedBeforeResponse("session/set_mode", "architect");
    steps.push("set_mode architect");

    const set = await ctx.request(acp.methods.agent.session.setConfigOption, {
      sessionId,
      configId: "mode",
      value: "code",
    });
    assert.equal(set.configOptions[0].currentValue, "code");
    assertAnnouncedBeforeResponse("session/set_config_option", "code");
    await ctx.request(acp.methods.agent.session.setMode, { sessionId, modeId: "architect" });
    steps.push("set_config_option code");

    answer = "code";
    const approved = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "## Implementation Plan\n1. Write it" }],
    });
    assert.equal(approved.stopReason, "end_turn");
    assert.equal(asked.length, 1);
    assert.equal(asked[0].toolCall.kind, "switch_mode");
    assert.deepEqual(asked[0].options.map((o) => [o.optionId, o.kind]), [
      ["code", "allow_always"],
      ["ask", "allow_once"],
      ["reject", "reject_once"],
    ]);
    assert.deepEqual(asked[0].toolCall.content, [
      { type: "content", content: { type: "text", text: "## Implementation Plan\n1. Write it" } },
    ]);
    assert.equal(modeUpdates(sessionId).at(-1), "code");
    assertAnnouncedBeforeResponse("session/prompt", "code");
    steps.push("approved switch to code");

    await ctx.request(acp.methods.agent.session.setMode, { sessionId, modeId: "architect" });
    answer = "reject";
    const rejected = await ctx.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: "another plan" }],
    });
    assert.equal(rejected.stopReason, "end_turn");
    assert.equal(asked.length, 2);
    assert.equal(modeUpdates(sessionId).at(-1), "architect");
    const ends = updates
      .filter((u) => u.update.sessionUpdate === "tool_call_update")
      .map((u) => u.update.status);
    assert.deepEqual(ends, ["completed", "failed"]);
    steps.push("rejected switch stays in architect");

    await assert.rejects(
      ctx.request(acp.methods.agent.session.setMode, { sessionId, modeId: "does-not-exist" }),
      (error) => {
        assert.ok(error instanceof acp.RequestError, String(error));
        assert.equal(error.code, -32602);
        assert.equal(error.data.field, "modeId");
        assert.deepEqual(error.data.valid, ["ask", "architect", "code"]);
        return true;
      },
    );
    steps.push("unknown mode is -32602");

    const loaded = await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: process.cwd(), mcpServers: [] });
    assert.equal(loaded.modes.currentModeId, "architect");
    assert.equal(loaded.configOptions[0].currentValue, "architect");
    steps.push("session/load reports architect");
    // the seed's order of changes, each announced once
    assert.deepEqual(modeUpdates(sessionId), ["architect", "code", "architect", "code", "architect"]);
  });
  child.stdin.end(); // the connection is closed; the agent ends with its input
  const { code } = await exited;
  await tapped;
  assert.equal(code, 0, "modefsm serve exits 0 when the client closes stdin");
  assert.deepEqual(problems, []);
  const received = frames.filter((f) => f.dir === "in").length;
  assert.equal(validated, received, "every frame the agent wrote was validated");
  console.log(JSON.stringify({ ok: true, steps, received, validated, sdk: "@agentclientprotocol/sdk" }));
} catch (error) {
  child.kill();
  console.log(JSON.stringify({ ok: false, steps, problems, error: String(error?.stack ?? error) }));
  process.exit(1);
}
