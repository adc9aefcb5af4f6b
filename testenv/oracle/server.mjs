// server.mjs: runs the oracle scripts in one long-lived node process, so a
// test binary pays node + lancedb start-up (~0.4 s of CPU) once instead of
// per call. Used by the Go helpers unless LANCED_ORACLE_SERVER=0.
//
// Protocol: one JSON request per line on stdin,
//   {"id":N,"script":"inspect.mjs","args":[...]}
// one JSON response per line on file descriptor 3 (stdout stays free for
// anything a library prints),
//   {"id":N,"ok":true,"stdout":"..."}
//   {"id":N,"ok":false,"stdout":"...","error":"...","usage":bool}
// Requests run concurrently. The server exits when stdin closes.
import { createWriteStream } from "node:fs";
import { createInterface } from "node:readline";
import { UsageError } from "./lib.mjs";
import { run as build } from "./build.mjs";
import { run as inspect } from "./inspect.mjs";
import { run as scan } from "./scan.mjs";
import { run as ops } from "./ops.mjs";

const scripts = { "build.mjs": build, "inspect.mjs": inspect, "scan.mjs": scan, "ops.mjs": ops };
const out = createWriteStream(null, { fd: 3 });

function respond(o) {
  out.write(JSON.stringify(o) + "\n");
}

async function handle(line) {
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    process.stderr.write(`oracle server: bad request line: ${line}\n`);
    return;
  }
  let stdout = "";
  const write = (s) => {
    stdout += s;
  };
  try {
    const fn = scripts[req.script];
    if (!fn) throw new UsageError(`unknown script ${req.script}`);
    await fn(req.args ?? [], write);
    respond({ id: req.id, ok: true, stdout });
  } catch (e) {
    const usage = e instanceof UsageError;
    respond({ id: req.id, ok: false, stdout, usage, error: usage ? e.message : e && e.stack ? e.stack : String(e) });
  }
}

process.on("unhandledRejection", (e) => {
  process.stderr.write(`oracle server: unhandled rejection: ${e && e.stack ? e.stack : e}\n`);
});

const rl = createInterface({ input: process.stdin });
rl.on("line", (line) => {
  handle(line);
});
rl.on("close", () => {
  out.end(() => process.exit(0));
});
