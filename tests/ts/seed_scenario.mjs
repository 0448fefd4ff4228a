// The official ACP TypeScript SDK (2.x) spawns `modefsm serve` and runs the seed scenario of
// the ACP "Session Modes" page: a new session, set_mode, the mode config option, an approved
// switch, a rejected one, an unknown mode. Every frame the agent writes is validated with the
// SDK's own zod schemas, and must keep every key and item through them (the schemas drop bad
// list items and unknown keys silently, so "parses" alone would miss a malformed message).
//
// Usage: node seed_scenario.mjs COMMAND [ARGS...]   (the agent command, e.g. python -m modefsm serve)
// Prints one JSON summary line on success; exits 1 with the reason otherwise.

import assert from "node:assert/strict";

import * as acp from "@agentclientprotocol/sdk";
// The generated zod schemas the SDK validates with (not exported by name, so by path).
import * as z from "./node_modules/@agentclientprotocol/sdk/dist/v1/schema/zod.gen.js";
import { agentCommand, FrameChecker, spawnTapped } from "./agent_wire.mjs";

const [command, args] = agentCommand("seed_scenario.mjs");

const checker = new FrameChecker({
  responses: {
    initialize: z.zInitializeResponse,
    "session/new": z.zNewSessionResponse,
    "session/load": z.zLoadSessionResponse,
    "session/set_mode": z.zSetSessionModeResponse,
    "session/set_config_option": z.zSetSessionConfigOptionResponse,
    "session/prompt": z.zPromptResponse,
  },
  requests: { "session/request_permission": z.zRequestPermissionRequest },
  notifications: { "session/update": z.zSessionNotification },
  error: z.zError,
});

// -- what went over the wire, both ways, in order -----------------------------------------
const frames = []; // {dir: "in" | "out", message}

// -- the agent process, with both pipes tapped ---------------------------------------------
const { child, exited, output, input, tapped, sentMethods } = spawnTapped(command, args, {
  onOut: (message) => frames.push({ dir: "out", message }),
  onIn: (message, sent) => {
    frames.push({ dir: "in", message });
    checker.check(message, sent);
  },
});

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
  await app.connectWith(acp.ndJsonStream(output, input), async (ctx) => {
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
  assert.deepEqual(checker.problems, []);
  const received = frames.filter((f) => f.dir === "in").length;
  assert.equal(checker.validated, received, "every frame the agent wrote was validated");
  const { validated } = checker;
  console.log(JSON.stringify({ ok: true, steps, received, validated, sdk: "@agentclientprotocol/sdk" }));
} catch (error) {
  child.kill();
  console.log(JSON.stringify({ ok: false, steps, problems: checker.problems, error: String(error?.stack ?? error) }));
  process.exit(1);
}
