// The official ACP TypeScript SDK (2.4, experimental/v2) checks `modefsm serve` against the
// letter of ACP v2 over stdio, streamable HTTP or WebSocket: `capabilities.session` present
// (and the session/list it promises served, a page at a time), `session/close` during a
// pending permission (the turn ends with `state_update idle {stopReason: "cancelled"}`
// before the close is answered, and the prompt still answers its messageId), and a
// `replayFrom` replay in which each agent message is announced before its chunks.
// Every result is validated with the SDK's v2 zod schemas (and, over stdio, every frame
// the agent writes), keeping every key and item.
//
// Usage: node conformance_v2.mjs stdio|http|ws COMMAND [ARGS...]   (the agent command;
// for http and ws it gets `--http 127.0.0.1:0` and must print the URL it listens on)
// Prints one JSON summary line on success; exits 1 with the reason otherwise.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { WebSocket } from "ws";
import * as z from "./node_modules/@agentclientprotocol/sdk/dist/v2/schema/zod.gen.js";
import { FrameChecker, keeps, spawnTapped } from "./agent_wire.mjs";

const [transport, command, ...args] = process.argv.slice(2);
if (!["stdio", "http", "ws"].includes(transport) || !command) {
  console.error("usage: node conformance_v2.mjs stdio|http|ws COMMAND [ARGS...]");
  process.exit(2);
}

const checker = new FrameChecker({
  responses: {
    initialize: z.zInitializeResponse,
    "session/new": z.zNewSessionResponse,
    "session/list": z.zListSessionsResponse,
    "session/resume": z.zResumeSessionResponse,
    "session/close": z.zCloseSessionResponse,
    "session/set_config_option": z.zSetSessionConfigOptionResponse,
    "session/prompt": z.zPromptResponse,
  },
  requests: { "session/request_permission": z.zRequestPermissionRequest },
  notifications: { "session/update": z.zUpdateSessionNotification, "$/cancel_request": z.zCancelRequestNotification },
  error: z.zError,
});

// A result from the SDK, checked with its schema as the stdio checker checks frames.
function valid(schema, value, what) {
  checker.received += 1;
  checker.validate(schema, value, what);
  return value;
}

const updates = [];
let asked = 0;

async function until(condition, what) {
  const deadline = Date.now() + 20_000; // the SDK delivers updates asynchronously
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function connect() {
  if (transport === "stdio") {
    const tapped = spawnTapped(command, args, { onIn: (message, sent) => checker.check(message, sent) });
    return {
      stream: acp.ndJsonStream(tapped.output, tapped.input),
      async end() {
        tapped.child.stdin.end();
        const { code } = await tapped.exited;
        await tapped.tapped;
        assert.equal(code, 0, "modefsm serve exits 0 when the client closes stdin");
      },
    };
  }
  const child = spawn(command, [...args, "--http", "127.0.0.1:0"], { stdio: ["ignore", "inherit", "pipe"] });
  const lines = createInterface({ input: child.stderr });
  const [url, token] = await new Promise((resolve, reject) => {
    lines.once("line", (line) => {
      const found = /listening on (http:\/\/127\.0\.0\.1:\d+\/acp) \(token in (.+)\)$/.exec(line);
      if (found) resolve([found[1], readFileSync(found[2], "utf8").trim()]);
      else reject(new Error(`unexpected first line on stderr: ${line}`));
    });
  });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const stream =
    transport === "http"
      ? createHttpStream(url, { headers: { Authorization: `Bearer ${token}` } })
      : // the token as a browser sends it: a subprotocol beside "acp"
        createWebSocketStream(url.replace("http://", "ws://"), {
          WebSocket,
          protocols: ["acp", `modefsm.token.${token}`],
        });
  return {
    stream,
    async end() {
      child.kill("SIGTERM");
      assert.equal(await exited, 0, "modefsm serve --http exits 0 on SIGTERM");
    },
  };
}

const steps = [];
const summary = {};
try {
  const { stream, end } = await connect();
  const app = acp
    .client({ name: "modefsm-ts-conformance" })
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
    })
    .onRequest("session/request_permission", () => {
      asked += 1;
      return new Promise(() => {}); // the user never decides: the close withdraws it
    });
  await app.connectWith(stream, async (cx) => {
    const init = valid(
      z.zInitializeResponse,
      await cx.request("initialize", { protocolVersion: 2, info: { name: "ts-conformance", version: "0" } }),
      "initialize",
    );
    assert.deepEqual(init.capabilities, { session: {} });
    steps.push("capabilities.session advertises the baseline");

    const cwd = `/ts-${transport}`;
    const made = [];
    for (let i = 0; i < 105; i += 1) made.push((await cx.request("session/new", { cwd, mcpServers: [] })).sessionId);
    const first = valid(z.zListSessionsResponse, await cx.request("session/list", { cwd }), "session/list");
    assert.equal(first.sessions.length, 100);
    assert.equal(typeof first.nextCursor, "string");
    const rest = valid(
      z.zListSessionsResponse,
      await cx.request("session/list", { cwd, cursor: first.nextCursor }),
      "session/list",
    );
    assert.equal(rest.sessions.length, 5);
    assert.ok(!("nextCursor" in rest));
    const listed = [...first.sessions, ...rest.sessions];
    assert.deepEqual(new Set(listed.map((s) => s.sessionId)), new Set(made));
    assert.ok(listed.every((s) => s.cwd === cwd && typeof s.updatedAt === "string"));
    const order = listed.map((s) => [s.updatedAt, s.sessionId]);
    const sorted = [...order].sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : 1) : a[0] < b[0] ? 1 : -1));
    assert.deepEqual(order, sorted);
    steps.push("session/list pages every session");
    summary.listed = listed.length;

    const sessionId = made[0];
    // a turn that ends with an agent message (in ask mode the scripted turn answers one)
    valid(z.zPromptResponse, await cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "hi" }] }), "session/prompt");
    await until(() => updates.some((u) => u.update.sessionUpdate === "agent_message_chunk"), "the agent's message");
    await cx.request("session/set_config_option", { sessionId, configId: "mode", type: "id", value: "architect" });
    const prompt = cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "## Plan" }] });
    await until(() => asked === 1, "the permission request");
    const mark = updates.length;
    valid(z.zCloseSessionResponse, await cx.request("session/close", { sessionId }), "session/close");
    const closedAt = updates.length;
    const ended = updates.slice(mark, closedAt).map((u) => u.update);
    assert.deepEqual(ended.at(-1), { sessionUpdate: "state_update", state: "idle", stopReason: "cancelled" });
    assert.ok(ended.some((u) => u.sessionUpdate === "tool_call_update" && u.status === "failed"));
    const answered = valid(z.zPromptResponse, await prompt, "session/prompt");
    assert.equal(typeof answered.messageId, "string");
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(updates.length, closedAt, "nothing of the session after its close was answered");
    steps.push("session/close during a permission ends the turn cancelled first");

    const mark2 = updates.length;
    valid(
      z.zResumeSessionResponse,
      await cx.request("session/resume", { sessionId, cwd, replayFrom: { type: "start" } }),
      "session/resume",
    );
    await until(() => updates.length > mark2 && updates.at(-1).update.sessionUpdate === "state_update", "idle");
    const replay = updates.slice(mark2, -1).map((u) => u.update);
    const announced = new Set();
    let chunks = 0;
    for (const u of replay) {
      if (u.sessionUpdate === "agent_message") {
        assert.deepEqual(u.content, []);
        announced.add(u.messageId);
      }
      if (u.sessionUpdate.endsWith("_chunk")) {
        chunks += 1;
        assert.ok(announced.has(u.messageId), `a chunk of ${u.messageId} before its message`);
      }
    }
    assert.equal(replay[0].sessionUpdate, "user_message");
    assert.ok(chunks >= 1 && announced.size >= 1, "the replay holds the agent's message");
    summary.replayed = replay.length;
    summary.chunks = chunks;
    steps.push("replayFrom announces each message before its chunks");
  });
  await end();
} catch (error) {
  checker.problems.push(`the story failed: ${error.stack || error}`);
}
if (checker.problems.length) {
  console.error(checker.problems.join("\n"));
  process.exit(1);
}
assert.equal(checker.validated, checker.received, "every frame and result was validated");
assert.ok(keeps);
console.log(JSON.stringify({ transport, steps, ...summary, validated: checker.validated, received: checker.received }));
