#!/usr/bin/env python3
"""A scripted stdio ACP agent: replays one connection of a real qwen-code capture
(shared/fixtures/acp-qwen-0.24.4/*.jsonl) over stdin/stdout, one JSON-RPC message per line, as
`qwen --acp` speaks. It is the stdio twin of tests/src/scripted.rs `replay`: the daemon's frames are
sent as captured (answers re-numbered to the client's ids); each client message the capture expects
must come next, or the script exits 3 with the difference on stderr (the client sees the exit).

usage: replay_stdio.py CAPTURE.jsonl [CONN]
"""
import json, sys

def main():
    path, conn = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    lines = [json.loads(l) for l in open(path) if l.strip()]
    ids = {}
    out = sys.stdout
    def recv():
        line = sys.stdin.readline()
        if not line:
            print("stdin closed before the capture ended", file=sys.stderr)
            sys.exit(0)
        return json.loads(line)
    for line in lines:
        if line["conn"] != conn:
            continue
        msg = line["msg"]
        if line["dir"] == "in":
            if "method" not in msg and json.dumps(msg.get("id")) in ids:
                msg = dict(msg, id=ids[json.dumps(msg.get("id"))])
            out.write(json.dumps(msg, separators=(",", ":")) + "\n")
            out.flush()
        elif "method" in msg:
            got = recv()
            if got.get("method") != msg["method"]:
                print("expected %s, got %s" % (msg["method"], json.dumps(got)[:300]), file=sys.stderr)
                sys.exit(3)
            if "id" in msg:
                ids[json.dumps(msg["id"])] = got.get("id")
        else:
            got = recv()
            if got.get("id") != msg.get("id") or "result" not in got:
                print("expected the answer to %s, got %s" % (msg.get("id"), json.dumps(got)[:300]), file=sys.stderr)
                sys.exit(3)
    # Stay up like an agent would until the client closes stdin.
    while sys.stdin.readline():
        pass

if __name__ == "__main__":
    main()
