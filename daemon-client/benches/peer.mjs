// The peer's side of `cargo bench -p daemon-client --bench peer`: qwen-code's own DaemonChannelBridge
// (TypeScript, from the npm package the interop tests install), driven by the Rust bench over
// stdin/stdout so both sides run in one invocation, alternating, on the same bytes.
//
//   usage: node peer.mjs <qwen-code package dir>
// stdin: one JSON line {kinds: {name: {frames: [string], seedKinds: bool}}}, then "run <name> <rounds>"
// lines; each answer is one line "<wall ns> <on-CPU ns> <frames> <events emitted> <protocol errors>".
//
// Timed per frame, exactly: `JSON.parse(frame)` of the frame as a string, then
// `bridge.handleEvent(session, {type: "session_update", data: msg.params})` — qwen's own entry point
// for one daemon event, which runs `handleSessionUpdate` and emits to listeners (one counter each for
// toolCall, textChunk, thoughtChunk and sessionUpdate, as a channel adapter would listen).
// Untimed, before each round: the bridge's tool-kind memory is reset (and, for result frames, seeded
// with every call's kind, as its `tool_call` would have left it).
import { readdirSync, readFileSync } from "node:fs";

// On-CPU time of this thread in ns (the first field of schedstat): a shared machine's waits for a
// core are not counted, on either side.
const cpuNs = () => BigInt(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]);
import { join } from "node:path";
import { createInterface } from "node:readline";

const pkg = process.argv[2];
const chunks = join(pkg, "chunks");
const file = readdirSync(chunks).find(
  (f) => f.endsWith(".js") && readFileSync(join(chunks, f), "utf8").includes("// packages/channels/base/dist/DaemonChannelBridge.js"),
);
if (!file) throw new Error(`no DaemonChannelBridge.js in ${chunks}`);
const { DaemonChannelBridge } = await import(join(chunks, file));

const bridge = new DaemonChannelBridge({ cwd: "/tmp", sessionFactory: async () => { throw new Error("unused"); } });
let events = 0;
for (const name of ["toolCall", "textChunk", "thoughtChunk", "sessionUpdate", "slashCommandOutput"]) {
  bridge.on(name, () => { events += 1; });
}
let errors = 0;
bridge.on("error", () => { errors += 1; });

let kinds;
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!kinds) {
    kinds = JSON.parse(line).kinds;
    for (const k of Object.values(kinds)) {
      k.session = { sessionId: JSON.parse(k.frames[0]).params.sessionId };
      k.calls = k.frames.map((f) => JSON.parse(f).params.update.toolCallId).filter((c) => c);
    }
    process.stdout.write("ready\n");
    continue;
  }
  const [, name, roundsText] = line.split(" ");
  const k = kinds[name];
  const rounds = Number(roundsText);
  let ns = 0n;
  let cpu = 0n;
  let frames = 0;
  const before = events;
  const errorsBefore = errors;
  for (let r = 0; r < rounds; r++) {
    bridge.toolCallKindsBySession = new Map();
    if (k.seedKinds) {
      bridge.toolCallKindsBySession.set(k.session.sessionId, new Map(k.calls.map((c) => [c, "execute"])));
    }
    const session = k.session;
    const list = k.frames;
    const c0 = cpuNs();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < list.length; i++) {
      const msg = JSON.parse(list[i]);
      bridge.handleEvent(session, { type: "session_update", data: msg.params });
    }
    ns += process.hrtime.bigint() - t0;
    cpu += cpuNs() - c0;
    frames += list.length;
  }
  process.stdout.write(`${ns} ${cpu} ${frames} ${events - before} ${errors - errorsBefore}\n`);
}
