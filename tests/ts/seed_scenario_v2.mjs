// The official ACP TypeScript SDK (2.4, experimental/v2) spawns `modefsm serve` and runs the
// seed story over ACP v2: a new session, set_config_option (type "id"), an approved switch, a
// rejected one, an unknown mode, then a restart and session/resume: without replayFrom
// (nothing replayed), from the start and from a message (the conversation replayed exactly
// as it was sent live, then the current state once). Every frame the agent
// writes is validated with the SDK's v2 zod schemas and must keep every key and item
// through them (the schemas drop bad list items and unknown keys silently).
//
// Usage: node seed_scenario_v2.mjs COMMAND [ARGS...]   (the agent command)
// Prints one JSON summary line on success; exits 1 with the reason otherwise.

import assert from "node:assert/strict";

import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import * as z from "./node_modules/@agentclientprotocol/sdk/dist/v2/schema/zod.gen.js";
import { agentCommand, FrameChecker, spawnTapped } from "./agent_wire.mjs";

const [command, args] = agentCommand("seed_scenario_v2.mjs");

const checker = new FrameChecker({
  responses: {
    initialize: z.zInitializeResponse,
    "session/new": z.zNewSessionResponse,
    "session/resume": z.zResumeSessionResponse,
    "session/set_config_option": z.zSetSessionConfigOptionResponse,
    "session/prompt": z.zPromptResponse,
  },
  requests: { "session/request_permission": z.zRequestPermissionRequest },
  notifications: { "session/update": z.zUpdateSessionNotification },
  error: z.zError,
});

const updates = [];
const asked = [];
let answer = "code";

async function run(story) {
  const { child, exited, output, input, tapped } = spawnTapped(command, args, {
    onIn: (message, sentMethods) => checker.check(message, sentMethods),
  });
  const app = acp
    .client({ name: "modefsm-ts-v2" })
    .onNotification("session/update", ({ params }) => {
      updates.push(params);
    })
    .onRequest("session/request_permission", ({ params }) => {
      asked.push(params);
      return { outcome: { outcome: "selected", optionId: answer } };
    });
  await app.connectWith(acp.ndJsonStream(output, input), async (cx) => {
    const init = await cx.request("initialize", { protocolVersion: 2, info: { name: "ts-v2", version: "0" } });
    assert.equal(init.protocolVersion, 2);
    await story(cx);
  });
  child.stdin.end(); // the connection is closed; the agent ends with its input
  const { code } = await exited;
  await tapped;
  assert.equal(code, 0, "modefsm serve exits 0 when the client closes stdin");
}

const mode = (options) => options.find((o) => o.category === "mode").currentValue;
const conversation = (list) =>
  list.filter((u) => !["state_update", "config_option_update"].includes(u.update.sessionUpdate));
// A replay announces each agent message (`agent_message` with `content: []`) before its
// first chunk; a live turn sends the chunks alone.
const primed = (list) => {
  const seen = new Set();
  return list.flatMap((u) => {
    const { sessionUpdate, messageId } = u.update;
    if (sessionUpdate !== "agent_message_chunk" || seen.has(messageId)) return [u];
    seen.add(messageId);
    return [{ sessionId: u.sessionId, update: { sessionUpdate: "agent_message", messageId, content: [] } }, u];
  });
};
async function until(condition, what) {
  const deadline = Date.now() + 10_000; // the SDK delivers updates asynchronously
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
const idleAfter = (mark) => () =>
  updates.length > mark && updates.at(-1).update.sessionUpdate === "state_update" && updates.at(-1).update.state === "idle";
let rejectedMessageId;
let live;
const states = () => updates.filter((u) => u.update.sessionUpdate === "state_update").map((u) => u.update.state);
const steps = [];
let sessionId;

try {
  await run(async (cx) => {
    steps.push("initialize");
    const s = await cx.request("session/new", { cwd: "/", mcpServers: [] });
    sessionId = s.sessionId;
    assert.equal(mode(s.configOptions), "ask");
    assert.ok(!("modes" in s));
    steps.push("session/new");
    const set = await cx.request("session/set_config_option", { sessionId, configId: "mode", type: "id", value: "architect" });
    assert.equal(mode(set.configOptions), "architect");
    steps.push("set_config_option architect");
    const p = await cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "## Plan" }] });
    assert.deepEqual(Object.keys(p), ["messageId"]);
    await new Promise((resolve) => setTimeout(resolve, 200)); // the SDK delivers updates async
    assert.equal(asked[0].subject.type, "tool_call");
    assert.deepEqual(states(), ["running", "requires_action", "running", "idle"]);
    const last = updates.filter((u) => u.update.sessionUpdate === "config_option_update").at(-1);
    assert.equal(mode(last.update.configOptions), "code");
    steps.push("approved switch to code");
    await cx.request("session/set_config_option", { sessionId, configId: "mode", type: "id", value: "architect" });
    answer = "reject";
    await new Promise((resolve) => setTimeout(resolve, 200));
    const before = updates.filter((u) => u.update.sessionUpdate === "config_option_update").length;
    const rejected = await cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: "start" }] });
    rejectedMessageId = rejected.messageId;
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(updates.filter((u) => u.update.sessionUpdate === "config_option_update").length, before);
    steps.push("rejected switch stays in architect");
    await assert.rejects(
      cx.request("session/set_config_option", { sessionId, configId: "mode", type: "id", value: "does-not-exist" }),
      (e) => e.code === -32602,
    );
    steps.push("unknown mode is -32602");
    live = conversation(updates);
  });
  await run(async (cx) => {
    const r = await cx.request("session/resume", { sessionId, cwd: "/" });
    assert.equal(mode(r.configOptions), "architect");
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.equal(updates.at(-1).update.sessionUpdate, "state_update");
    steps.push("session/resume reports architect");
    let mark = updates.length;
    const all = await cx.request("session/resume", { sessionId, cwd: "/", replayFrom: { type: "start" } });
    assert.equal(mode(all.configOptions), "architect");
    await until(idleAfter(mark), "the idle state after the replay");
    assert.deepEqual(updates.slice(mark, -1), primed(live));
    assert.equal(live.length, 8);
    steps.push("session/resume replayFrom start replays the conversation");
    mark = updates.length;
    const from = { type: "_modefsm/message", messageId: rejectedMessageId };
    await cx.request("session/resume", { sessionId, cwd: "/", replayFrom: from });
    await until(idleAfter(mark), "the idle state after the replay");
    const start = live.findIndex((u) => u.update.messageId === rejectedMessageId);
    assert.equal(live[start].update.sessionUpdate, "user_message");
    assert.deepEqual(updates.slice(mark, -1), primed(live.slice(start)));
    steps.push("session/resume replayFrom a message replays from it");
  });
} catch (error) {
  checker.problems.push(`the story failed: ${error.stack || error}`);
}
if (checker.problems.length) {
  console.error(checker.problems.join("\n"));
  process.exit(1);
}
const { validated, received } = checker;
assert.equal(validated, received, "every frame the agent wrote was validated");
console.log(JSON.stringify({ steps, validated, received }));
