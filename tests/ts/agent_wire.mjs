// What both scenarios share: `modefsm serve` spawned with both pipes tapped, and every frame
// the agent writes validated with the SDK's zod schemas. A frame must keep every key and item
// through its schema (the schemas drop bad list items and unknown keys silently, so "parses"
// alone would miss a malformed message).

import { spawn } from "node:child_process";
import { Readable } from "node:stream";

// The agent command from this script's arguments (`node SCRIPT COMMAND [ARGS...]`); exits 2
// with the usage line when there is none.
export function agentCommand(script) {
  const [command, ...args] = process.argv.slice(2);
  if (!command) {
    console.error(`usage: node ${script} COMMAND [ARGS...]`);
    process.exit(2);
  }
  return [command, args];
}

// Whether `parsed` keeps everything in `raw`: the same scalars, every key, every list item.
// The schemas may add defaults (absent capabilities become false); they must not drop
// anything (a list item they could not read, a key they do not know).
export function keeps(parsed, raw) {
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

// Checks each frame from the agent against the schemas of one protocol version:
// `responses` by the method of the request answered, `requests` and `notifications` by
// method, `error` for error objects. Counts what it received and what it validated.
export class FrameChecker {
  constructor({ responses, requests, notifications, error }) {
    this.schemas = { responses, requests, notifications, error };
    this.problems = [];
    this.received = 0;
    this.validated = 0;
  }

  validate(schema, value, what) {
    const parsed = schema.safeParse(value);
    if (!parsed.success) {
      this.problems.push(`${what}: rejected by the SDK schema: ${parsed.error.message}`);
      return;
    }
    if (!keeps(parsed.data, value)) {
      this.problems.push(`${what}: changed by the SDK schema (a dropped item or unknown key): ${JSON.stringify(value)}`);
      return;
    }
    this.validated += 1;
  }

  // `sentMethods`: our request id -> method, to find the schema of a response.
  check(message, sentMethods) {
    this.received += 1;
    const { responses, requests, notifications, error } = this.schemas;
    if (message.jsonrpc !== "2.0") this.problems.push(`not JSON-RPC 2.0: ${JSON.stringify(message)}`);
    if ("method" in message) {
      const schema = ("id" in message ? requests : notifications)[message.method];
      if (!schema) this.problems.push(`unexpected ${message.method} from the agent`);
      else this.validate(schema, message.params, message.method);
    } else if ("error" in message) {
      this.validate(error, message.error, `error answering ${sentMethods.get(message.id)}`);
    } else {
      const method = sentMethods.get(message.id);
      const schema = responses[method];
      if (!schema) this.problems.push(`a response to an unknown request: ${JSON.stringify(message)}`);
      else this.validate(schema, message.result, `${method} result`);
    }
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

// Spawns the agent (`command args...`) with both pipes tapped: `onOut(message)` sees each
// frame the client sends, `onIn(message, sentMethods)` each frame the agent writes.
// Returns the child, `exited` (resolves to {code, signal}), the `output` and `input`
// streams to give the SDK, `tapped` (resolves once the agent's stdout has ended) and
// `sentMethods` (our request id -> method).
export function spawnTapped(command, args, { onIn, onOut = () => {} }) {
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
  const sentMethods = new Map();
  const tapOut = lineSplitter((message) => {
    onOut(message);
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
  const [input, forCheck] = Readable.toWeb(child.stdout).tee();
  const tapIn = lineSplitter((message) => onIn(message, sentMethods));
  const tapped = (async () => {
    for await (const chunk of forCheck) tapIn(chunk);
  })();
  return { child, exited, output, input, tapped, sentMethods };
}
