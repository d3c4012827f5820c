#!/usr/bin/env python3
"""A minimal stdio ACP agent for transport tests: `initialize`, `session/new` (ids s1, s2, …),
`session/load` (any id it could have made: sessions "persist"), and `session/prompt`, which streams the prompt's text back as one
`agent_message_chunk` and ends the turn. A prompt `sleep N` waits N seconds first; `exit` makes the
process exit mid-turn. Its pid is written to the file named by $ECHO_AGENT_PIDFILE, if set."""
import json, os, sys, time

if os.environ.get("ECHO_AGENT_PIDFILE"):
    with open(os.environ["ECHO_AGENT_PIDFILE"], "a") as f:
        f.write("%d\n" % os.getpid())
sessions = set()
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    method, mid, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}}})
    elif method == "session/new":
        sid = "s%d-%d" % (os.getpid(), len(sessions) + 1); sessions.add(sid)
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": sid}})
    elif method == "session/load":
        if str(params.get("sessionId", "")).startswith("s"):
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "unknown session"}})
    elif method == "session/prompt":
        text = params["prompt"][0]["text"]
        if text == "exit":
            os._exit(7)
        if text.startswith("sleep "):
            time.sleep(float(text.split()[1]))
        send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": params["sessionId"],
              "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})
