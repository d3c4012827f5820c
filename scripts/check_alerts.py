"""The alert checks behind scripts/check-alerts: the chart's alert rules and dashboard, proven with
Prometheus itself. Each check prints what it verified; any failure exits 1 with the reason.

1. `promtool check rules` and `promtool test rules` (tests/prometheus/alerts.test.yml) on the
   PrometheusRule the chart renders with its default values.
2. Every query of the rules and of the Grafana dashboard parses (promtool, as recording rules).
3. End to end: a real Prometheus server on a free loopback port scrapes a running chat-bridge whose
   daemon is a separate `chat-bridge shell-agent` process, with the chart's rules (only the `for` of
   ChatBridgeDaemonDown shortened). Every query is accepted by the server's /api/v1/query; every
   metric and label the queries name is one a freshly started bridge exports; the test stops the
   daemon, sees ChatBridgeDaemonDown firing through /api/v1/alerts, restarts the daemon on the same
   address and sees the alert resolve.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import helm_python as helm
import yaml

ROOT = sys.argv[1]
CHART = os.path.join(ROOT, "helm", "chat-bridge")
BIN = os.environ["CHAT_BRIDGE_BIN"]
PROMETHEUS = os.environ.get("PROMETHEUS", "prometheus")
PROMTOOL = os.environ.get("PROMTOOL", "promtool")
# Bounds of the end-to-end part (it takes about 15 s when healthy).
START_LIMIT = 20.0
ALERT_LIMIT = 30.0
failures = []
procs = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def render(values):
    chart = helm.Chart.load(CHART)
    return chart.render(values, name="chat-bridge", namespace="chat", is_install=True)


def rule_groups(manifests):
    rule = yaml.safe_load(manifests["chat-bridge/templates/prometheusrule.yaml"])
    return {"groups": rule["spec"]["groups"]}


def dashboard(manifests):
    cm = yaml.safe_load(manifests["chat-bridge/templates/dashboard.yaml"])
    return json.loads(cm["data"]["chat-bridge.json"])


# Grafana's variables, as the dashboard's "All" would set them.
GRAFANA_VARS = {"$__rate_interval": "1m", "$job": ".*", "$namespace": ".*"}


def dashboard_queries(dash):
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets", []):
            expr = t["expr"]
            for k, v in GRAFANA_VARS.items():
                expr = expr.replace(k, v)
            out.append((f'dashboard panel "{panel["title"]}" {t["refId"]}', expr))
    return out


def rules_queries(groups):
    return [(f'alert {r["alert"]}', r["expr"]) for g in groups["groups"] for r in g["rules"]]


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, cwd=cwd)


SELECTOR = re.compile(r'\b(chatbridge_[a-z0-9_]+|up)\b(\{[^}]*\})?')
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
GROUPING = re.compile(r'\b(?:by|on|without|ignoring)\s*\(([^)]*)\)')
# Labels Prometheus adds to every scraped series, and the summaries' own.
TARGET_LABELS = {"job", "instance", "namespace", "quantile"}


def selectors(expr):
    """(metric, matchers) for each vector selector in a PromQL expression."""
    out = []
    for m in SELECTOR.finditer(expr):
        matchers = []
        if m.group(2):
            body = m.group(2)[1:-1]
            pos = 0
            while pos < len(body):
                mm = MATCHER.match(body, pos)
                if not mm:
                    raise ValueError(f"cannot read the matchers {m.group(2)}")
                matchers.append((mm.group(1), mm.group(2), mm.group(3)))
                pos = mm.end()
        out.append((m.group(1), matchers))
    return out


def exported(metrics_text):
    """{family: [labels dict, …]} from Prometheus text."""
    fams = {}
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s', line)
        if not m:
            continue
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        fams.setdefault(m.group(1), []).append(labels)
    return fams


def matches(labels, matchers):
    for name, op, value in matchers:
        if name in ("job", "namespace", "instance"):
            continue  # target labels: set by the scrape, not by the bridge
        got = labels.get(name)
        if got is None and op in ("=", "=~") and value not in ("", ".*"):
            return False
        got = got or ""
        ok = {
            "=": got == value,
            "!=": got != value,
            "=~": re.fullmatch(value, got) is not None,
            "!~": re.fullmatch(value, got) is None,
        }[op]
        if not ok:
            return False
    return True


def check_names_and_labels(what, expr, fams):
    """Every metric the expression names is exported with a series its matchers select, and every
    label it groups by is one those metrics carry."""
    carried = set(TARGET_LABELS)
    for metric, matchers in selectors(expr):
        if metric == "up":
            continue  # made by Prometheus for every target
        series = fams.get(metric)
        if not check(series is not None, f"{what}: {metric} is exported by /metrics at start-up"):
            continue
        check(any(matches(s, matchers) for s in series),
              f"{what}: {metric}{{{', '.join(n + o + repr(v) for n, o, v in matchers)}}} selects a series at start-up")
        for s in series:
            carried |= set(s)
    for group in GROUPING.findall(expr):
        for label in filter(None, (x.strip() for x in group.split(","))):
            check(label in carried, f"{what}: groups by {label}, a label its metrics carry")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def api(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        _, body = get(url)
    except urllib.error.HTTPError as e:
        body = e.read().decode()
    return json.loads(body)


def wait_for(what, limit, probe):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            got = probe()
            if got:
                return got
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{what}: not within {limit:.0f} s")


def spawn(args, env, log, stdin=subprocess.DEVNULL):
    p = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=stdin,
                         start_new_session=True)
    procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def alert_state(prom, name):
    alerts = api(prom, "/api/v1/alerts")["data"]["alerts"]
    states = [a["state"] for a in alerts if a["labels"].get("alertname") == name]
    return states[0] if states else "inactive"


def end_to_end(tmp, rules_for_e2e, queries):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHAT_BRIDGE_")}
    daemon_port, http_port, prom_port = free_port(), free_port(), free_port()
    token = "alerts-e2e-token-" + os.urandom(6).hex()
    daemon_log = open(os.path.join(tmp, "shell-agent.log"), "ab")
    daemon_args = [BIN, "shell-agent", "--listen", f"127.0.0.1:{daemon_port}", "--token", token]
    daemon = spawn(daemon_args, clean, daemon_log)
    wait_for("shell-agent listening", START_LIMIT,
             lambda: socket.create_connection(("127.0.0.1", daemon_port), 0.5).close() or True)

    bridge_env = {
        **clean,
        "CHAT_BRIDGE_SERVICE__PLATFORM": "console",
        "CHAT_BRIDGE_DAEMON__URL": f"ws://127.0.0.1:{daemon_port}/acp",
        "CHAT_BRIDGE_DAEMON__TOKEN": token,
        "CHAT_BRIDGE_HTTP__LISTEN": f"127.0.0.1:{http_port}",
        "CHAT_BRIDGE_DATABASE__URL": f"sqlite://{tmp}/chat-bridge.db",
        "CHAT_BRIDGE_LOG": "info",
    }
    bridge_log = open(os.path.join(tmp, "chat-bridge.log"), "ab")
    # The console channel reads stdin: a pipe kept open keeps the bridge serving.
    bridge = spawn([BIN], bridge_env, bridge_log, stdin=subprocess.PIPE)
    bridge_url = f"http://127.0.0.1:{http_port}"
    wait_for("chat-bridge /readyz 200", START_LIMIT, lambda: get(bridge_url + "/readyz")[0] == 200)

    # What a freshly started bridge exports (issue 15 item 7: every family from the first scrape).
    fams = exported(get(bridge_url + "/metrics")[1])
    print(f"  …     a fresh chat-bridge exports {len(fams)} series names")
    for what, expr in queries:
        check_names_and_labels(what, expr, fams)

    rules_path = os.path.join(tmp, "rules.yml")
    with open(rules_path, "w") as f:
        yaml.safe_dump(rules_for_e2e, f, sort_keys=False, width=1000)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [rules_path],
        "scrape_configs": [{
            # The labels a ServiceMonitor gives the release's series (the rules select on them).
            "job_name": "chat-bridge",
            "static_configs": [{"targets": [f"127.0.0.1:{http_port}"], "labels": {"namespace": "chat"}}],
        }],
    }
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    prom_log = open(os.path.join(tmp, "prometheus.log"), "ab")
    spawn([PROMETHEUS, f"--config.file={config_path}", f"--storage.tsdb.path={tmp}/tsdb",
           f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], clean, prom_log)
    prom = f"http://127.0.0.1:{prom_port}"
    wait_for("Prometheus scraping the bridge", START_LIMIT, lambda: api(
        prom, "/api/v1/query", query='chatbridge_daemon_connected{job="chat-bridge",namespace="chat"} == 1'
    )["data"]["result"])
    check(True, "Prometheus scrapes chat-bridge; chatbridge_daemon_connected is 1")

    for what, expr in queries:
        r = api(prom, "/api/v1/query", query=expr)
        check(r.get("status") == "success", f"{what}: Prometheus evaluates it ({r.get('error', 'ok')})")

    # Must not fire: wait until Prometheus holds 4 s of samples of a connected daemon (twice the
    # shortened `for`), evaluated every second.
    wait_for("4 s of a connected daemon in Prometheus", START_LIMIT, lambda: api(
        prom, "/api/v1/query",
        query='min_over_time(chatbridge_daemon_connected{job="chat-bridge"}[5s]) == 1 '
              'and count_over_time(chatbridge_daemon_connected{job="chat-bridge"}[5s]) >= 4')["data"]["result"])
    check(alert_state(prom, "ChatBridgeDaemonDown") == "inactive",
          "ChatBridgeDaemonDown does not fire while the daemon is connected")

    t0 = time.monotonic()
    stop(daemon)
    try:
        wait_for("ChatBridgeDaemonDown firing", ALERT_LIMIT,
                 lambda: alert_state(prom, "ChatBridgeDaemonDown") == "firing")
        check(True, f"daemon stopped: ChatBridgeDaemonDown firing after {time.monotonic() - t0:.1f} s")
    except TimeoutError as e:
        check(False, str(e))
        return
    alert = [a for a in api(prom, "/api/v1/alerts")["data"]["alerts"]
             if a["labels"]["alertname"] == "ChatBridgeDaemonDown"][0]
    check(alert["labels"].get("severity") == "critical"
          and alert["annotations"].get("runbook_url", "").endswith("#chatbridgedaemondown"),
          "the firing alert carries severity critical and its runbook link")

    t1 = time.monotonic()
    spawn(daemon_args, clean, daemon_log)
    try:
        wait_for("ChatBridgeDaemonDown resolved", ALERT_LIMIT,
                 lambda: alert_state(prom, "ChatBridgeDaemonDown") == "inactive")
        check(True, f"daemon restarted: ChatBridgeDaemonDown resolved after {time.monotonic() - t1:.1f} s")
    except TimeoutError as e:
        check(False, str(e))
    check(bridge.poll() is None, "chat-bridge kept running throughout")


def main():
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="chat-bridge-alerts.")
    try:
        print("alert rules: promtool")
        groups = rule_groups(render({"metrics": {"prometheusRule": {"enabled": True}}}))
        names = [r["alert"] for g in groups["groups"] for r in g["rules"]]
        rules_path = os.path.join(tmp, "rules.yml")
        with open(rules_path, "w") as f:
            yaml.safe_dump(groups, f, sort_keys=False, width=1000)
        out = promtool("check", "rules", rules_path)
        check(out.returncode == 0, f"promtool check rules: {len(names)} alerts {(out.stdout + out.stderr).strip().splitlines()[-1]}")
        for g in groups["groups"]:
            for r in g["rules"]:
                anchor = r["annotations"]["runbook_url"].rsplit("#", 1)[-1]
                check(r["labels"].get("severity") in ("critical", "warning") and r["annotations"].get("summary")
                      and anchor == r["alert"].lower(), f"{r['alert']}: severity, summary, runbook_url #{anchor}")
        with open(os.path.join(ROOT, "docs", "operations.md")) as f:
            headings = {line[4:].strip() for line in f if line.startswith("### ")}
        for name in names:
            check(name in headings, f"docs/operations.md has a runbook section ### {name}")
        test_file = os.path.join(ROOT, "tests", "prometheus", "alerts.test.yml")
        shutil.copy(test_file, tmp)
        out = promtool("test", "rules", "alerts.test.yml", cwd=tmp)
        check(out.returncode == 0, "promtool test rules tests/prometheus/alerts.test.yml "
              + ("SUCCESS" if out.returncode == 0 else "\n" + out.stdout + out.stderr))
        with open(test_file) as f:
            tested = {t["alert_rule_test"][0]["alertname"] for t in yaml.safe_load(f)["tests"]}
            f.seek(0)
            cases = yaml.safe_load(f)["tests"]
        for name in names:
            fires = any(c["alertname"] == name and c["exp_alerts"] for t in cases for c in t["alert_rule_test"])
            quiet = any(c["alertname"] == name and not c["exp_alerts"] for t in cases for c in t["alert_rule_test"])
            check(name in tested and fires and quiet, f"{name}: unit-tested firing and not firing")

        print("dashboard and rule queries: Prometheus's parser")
        everything = render({"metrics": {"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}})
        dash = dashboard(everything)
        queries = rules_queries(groups) + dashboard_queries(dash)
        recording = {"groups": [{"name": "queries", "rules": [
            {"record": f"chatbridge_query_{i}", "expr": expr} for i, (_, expr) in enumerate(queries)]}]}
        qpath = os.path.join(tmp, "queries.yml")
        with open(qpath, "w") as f:
            yaml.safe_dump(recording, f, width=1000)
        out = promtool("check", "rules", qpath)
        check(out.returncode == 0, f"promtool parses all {len(queries)} queries ({len(queries) - len(names)} dashboard)"
              + ("" if out.returncode == 0 else "\n" + out.stdout + out.stderr))

        print("end to end: a real Prometheus, a running chat-bridge, its daemon stopped and restarted")
        e2e = rule_groups(render({"metrics": {"prometheusRule": {"enabled": True, "alerts": {
            "daemonDown": {"for": "2s", "severity": "critical"}}}}}))
        end_to_end(tmp, e2e, queries)
    finally:
        for p in procs:
            stop(p)
        if failures:
            for name in ("chat-bridge.log", "shell-agent.log", "prometheus.log"):
                path = os.path.join(tmp, name)
                if os.path.exists(path):
                    with open(path, errors="replace") as f:
                        tail = f.read()[-3000:]
                    print(f"--- last of {name}:\n{tail}")
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{len(failures)} failed" if failures else "", end="")
    if failures:
        sys.exit(1)
    print(f"alert checks passed in {time.monotonic() - started:.1f} s")


main()
