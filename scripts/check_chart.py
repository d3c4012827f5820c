"""The chart checks behind scripts/check-chart. Each check prints what it verified; any failure
exits 1 with the reason."""

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import helm_python as helm
import kubernetes_validate
import yaml
from openapi_spec_validator import validate as validate_openapi

ROOT = sys.argv[1]
CHART = os.path.join(ROOT, "helm", "chat-bridge")
KUBE = "1.37.0"
failures = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)


def load_values(path):
    with open(path) as f:
        return yaml.safe_load(f) or {}


def lint(values, label):
    report = helm.lint(CHART, values, strict=True, namespace="chat", kube_version="v1.31.0")
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    errors = report.get("errors") or []
    for m in problems:
        print(f"        {m}")
    for e in errors:
        print(f"        {e}")
    check(not problems and not errors, f"helm lint --strict ({label})")


def chart_notes(values):
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values, name="chat-bridge", namespace="chat", is_install=True)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def render(values, label):
    chart = helm.Chart.load(CHART)
    chart.validate_schema(values)
    check(True, f"values.schema.json accepts the {label} values")
    manifests = chart.render(values, name="chat-bridge", namespace="chat", is_install=True)
    docs = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            check("readyz" in text and "docs/operations.md" in text, f"NOTES.txt renders ({label})")
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return docs


def validate_k8s(docs, label):
    for doc in docs:
        kind = doc["kind"]
        name = f'{kind}/{doc["metadata"]["name"]}'
        if kind == "ServiceMonitor":
            # A Prometheus Operator CRD: not in the Kubernetes schemas; check what it must say.
            ep = doc["spec"]["endpoints"][0]
            check(ep["port"] == "http" and ep["path"] == "/metrics", f"{name} scrapes /metrics ({label})")
            continue
        if kind == "PrometheusRule":
            # Its expressions are parsed and unit-tested by promtool in scripts/check-alerts.
            rules = [r for g in doc["spec"]["groups"] for r in g["rules"]]
            check(bool(rules) and all(set(r) <= {"alert", "expr", "for", "labels", "annotations"}
                                      and r["labels"].get("severity") and r["annotations"].get("runbook_url")
                                      for r in rules),
                  f"{name}: {len(rules)} alerts, each with severity and runbook_url ({label})")
            continue
        try:
            kubernetes_validate.validate(doc, KUBE, strict=True)
            check(True, f"kubernetes-validate --strict {name} ({label})")
        except Exception as e:  # noqa: BLE001 - the validator's errors carry the reason
            check(False, f"kubernetes-validate --strict {name} ({label}): {e}")


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def duration_ms(value):
    """A duration by the binary's rules (docs/configuration.md): whole seconds as a number or digits, or
    a sum of <digits><unit> parts (ms, s, m, h, d). None for anything the binary refuses."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 1000 if value >= 0 else None
    if not isinstance(value, str):
        return None
    if re.fullmatch(r"[0-9]+", value):
        return int(value) * 1000
    if not re.fullmatch(r"([0-9]+(ms|s|m|h|d))+", value):
        return None
    per = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
    return sum(int(n) * per[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d)", value))


def render_fails(values, label, *says):
    """The render of `values` fails, and its error says each of `says`."""
    try:
        render(values, label)
        check(False, f"{label}: the render fails (it rendered)")
    except helm.HelmError as e:
        msg = " ".join(str(e).split())
        check(all(s in msg for s in says), f"{label}: the render fails saying so ({msg[-160:]})")


def renders(values, label):
    """The rendered documents of `values`, or None (a failed check) when the schema or the render refuses them."""
    try:
        return render(values, label)
    except helm.HelmError as e:
        check(False, f"{label}: renders ({' '.join(str(e).split())[-160:]})")
        return None


def selects(selector, labels):
    """Whether a Kubernetes label selector (a Service's map, or matchLabels/matchExpressions) selects `labels`."""
    if selector is None:
        return False
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        have = e["key"] in labels
        if e["operator"] == "In" and not (have and labels[e["key"]] in e["values"]):
            return False
        if e["operator"] == "NotIn" and have and labels[e["key"]] in e["values"]:
            return False
        if e["operator"] == "Exists" and not have:
            return False
        if e["operator"] == "DoesNotExist" and have:
            return False
    return True


def test_pod_is_apart(docs, label):
    """The `helm test` pod is no chat-bridge pod to the Service, PDB, NetworkPolicy or Deployment, and the
    NetworkPolicy (if any) admits it to the HTTP port."""
    pods = [p for p in by_kind(docs, "Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    if not pods:
        check(False, f"{label}: a `helm test` pod")
        return
    labels = pods[0]["metadata"]["labels"]
    selectors = [(f'Service {d["metadata"]["name"]}', d["spec"]["selector"]) for d in by_kind(docs, "Service")]
    selectors += [(f'PodDisruptionBudget {d["metadata"]["name"]}', d["spec"]["selector"])
                  for d in by_kind(docs, "PodDisruptionBudget")]
    selectors += [(f'NetworkPolicy {d["metadata"]["name"]}', d["spec"]["podSelector"]) for d in by_kind(docs, "NetworkPolicy")]
    for d in by_kind(docs, "Deployment"):
        selectors.append((f'Deployment {d["metadata"]["name"]}', d["spec"]["selector"]))
        for t in d["spec"]["template"]["spec"].get("topologySpreadConstraints", []):
            selectors.append((f'spread {t["topologyKey"]}', t["labelSelector"]))
    hit = [name for name, sel in selectors if selects(sel, labels)]
    check(not hit, f"{label}: the test pod's labels are selected by none of {len(selectors)} selectors "
                   f"(Service, PDB, NetworkPolicy, Deployment, spread){': ' + ', '.join(hit) if hit else ''}")
    for np in by_kind(docs, "NetworkPolicy"):
        admits = any(
            (not rule.get("ports") or any(p.get("port") == "http" for p in rule["ports"]))
            and any("podSelector" in peer and "namespaceSelector" not in peer and selects(peer["podSelector"], labels)
                    for peer in rule.get("from", []))
            for rule in np["spec"].get("ingress", []))
        check(admits, f"{label}: the NetworkPolicy admits the test pod to the HTTP port")


def check_config(text, env):
    """`chat-bridge check-config` on a rendered config.toml, with only `env` as CHAT_BRIDGE_* variables."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        path = f.name
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("CHAT_BRIDGE_")}
    run_env.update(env)
    out = subprocess.run(
        [os.environ["CHAT_BRIDGE_BIN"], "--config", path, "check-config"],
        capture_output=True, text=True, env=run_env,
    )
    os.unlink(path)
    return out


def config_is_refused_by_the_binary(docs, label, env, says):
    text = by_kind(docs, "ConfigMap")[0]["data"]["config.toml"]
    out = check_config(text, env)
    check(out.returncode != 0 and says in out.stderr,
          f"chat-bridge check-config refuses the rendered config.toml ({label}): {out.stderr.strip() or out.stdout.strip()}")


def config_is_accepted_by_the_binary(docs, label, env):
    cm = by_kind(docs, "ConfigMap")[0]
    text = cm["data"]["config.toml"]
    cfg = tomllib.loads(text)
    port = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["ports"][0]
    check(port["name"] == "http" and cfg["http"]["listen"].endswith(f':{port["containerPort"]}'),
          f"config.toml listens on the container port {port['containerPort']} ({label})")
    out = check_config(text, env)
    platform = cfg["service"]["platform"]
    check(out.returncode == 0 and f"platform {platform}" in out.stdout,
          f"chat-bridge check-config accepts the rendered config.toml ({label}): {out.stdout.strip() or out.stderr.strip()}")


def deployment_is_hardened(docs, label, values):
    dep = by_kind(docs, "Deployment")[0]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    sc = c["securityContext"]
    check(pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0,
          f"runs as non-root ({label})")
    check(sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
          and sc["capabilities"]["drop"] == ["ALL"], f"read-only root, no escalation, all capabilities dropped ({label})")
    check(c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz",
          f"probes on /healthz and /readyz ({label})")
    check("requests" in c["resources"] and "limits" in c["resources"], f"resources set ({label})")
    check(dep["spec"]["replicas"] == values["replicaCount"], f"replicas = {values['replicaCount']} ({label})")
    grace = pod["terminationGracePeriodSeconds"]
    drain = values["config"]["service"].get("drain_timeout", "20s")
    check(grace * 1000 >= duration_ms(drain) + 5000,
          f"terminationGracePeriodSeconds {grace} ≥ drain_timeout {drain} + 5 s ({label})")
    spread = pod.get("topologySpreadConstraints", [])
    check(any(t["topologyKey"] == "kubernetes.io/hostname"
              and t["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"] for t in spread),
          f"replicas spread across nodes (the standby away from the active one) ({label})")
    secret = c["envFrom"][0]["secretRef"]["name"]
    return secret


defaults = load_values(os.path.join(CHART, "values.yaml"))
prod = load_values(os.path.join(CHART, "ci", "production-values.yaml"))

print("chart: default values")
lint(None, "default")
docs = render(None, "default")
validate_k8s(docs, "default")
deployment_is_hardened(docs, "default", defaults)
slack_tokens = {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x", "CHAT_BRIDGE_SLACK__APP_TOKEN": "xapp-x"}
# A1: the defaults name nobody, so they refuse to start until the operator says who may run commands.
config_is_refused_by_the_binary(docs, "default, no allowlist: A1", slack_tokens, "(A1)")
config_is_refused_by_the_binary(docs, "default, an empty token: S1",
                                {**slack_tokens, "CHAT_BRIDGE_SLACK__APP_TOKEN": ""}, "CHAT_BRIDGE_SLACK__APP_TOKEN is set but empty")
with_users = copy.deepcopy(defaults)
with_users["config"]["slack"]["allowed_users"] = ["U0123ABCD"]
config_is_accepted_by_the_binary(render(with_users, "default + slack.allowed_users"), "default + slack.allowed_users", slack_tokens)
with_open = copy.deepcopy(defaults)
with_open["config"]["access"]["open"] = True
config_is_accepted_by_the_binary(render(with_open, "default + access.open"), "default + access.open", slack_tokens)
check(len(by_kind(docs, "Secret")) == 1 and len(by_kind(docs, "PodDisruptionBudget")) == 1
      and not by_kind(docs, "NetworkPolicy") and not by_kind(docs, "ServiceMonitor"),
      "defaults: a created Secret and a PDB; no NetworkPolicy or ServiceMonitor")

check(not by_kind(docs, "Ingress") and not by_kind(docs, "PrometheusRule")
      and [c["metadata"]["name"] for c in by_kind(docs, "ConfigMap")] == ["chat-bridge"],
      "defaults: no Ingress, PrometheusRule or dashboard")
test_pods = [p for p in by_kind(docs, "Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
check(len(test_pods) == 1 and test_pods[0]["spec"]["containers"][0]["command"][-1]
      == "http://chat-bridge:8080/readyz", "defaults: a `helm test` pod asks the Service's /readyz")
check(all(not p.get("name") == "slack" for p in
          by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["ports"])
      and [p["name"] for p in by_kind(docs, "Service")[0]["spec"]["ports"]] == ["http"],
      "defaults (Slack Socket Mode): only the HTTP port, no Slack port")


def service_port_reaches(docs, port_name):
    """The container port a Service port name leads to (by the Service's targetPort)."""
    svc = by_kind(docs, "Service")[0]
    sp = [p for p in svc["spec"]["ports"] if p["name"] == port_name]
    if not sp:
        return None
    target = sp[0]["targetPort"]
    for c in by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"]:
        for p in c["ports"]:
            if target in (p["name"], p["containerPort"]):
                return p["containerPort"]
    return None


def ingress_routes(docs):
    """(path, service name, service port name) of every Ingress rule."""
    out = []
    for ing in by_kind(docs, "Ingress"):
        for rule in ing["spec"]["rules"]:
            for p in rule["http"]["paths"]:
                b = p["backend"]["service"]
                out.append((p["path"], b["name"], b["port"].get("name", b["port"].get("number"))))
    return out


print("chart: Slack HTTP Events API behind an Ingress")
slack_http = copy.deepcopy(defaults)
slack_http["config"]["slack"].update(mode="http", listen="0.0.0.0:3000", allowed_users=["U0123ABCD"])
slack_http["ingress"] = {"enabled": True, "className": "nginx", "hosts": [{"host": "bridge.example.com"}],
                         "tls": [{"secretName": "bridge-tls", "hosts": ["bridge.example.com"]}],
                         "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"}}
slack_http["networkPolicy"] = {**defaults["networkPolicy"], "enabled": True}
lint(slack_http, "slack http")
docs = render(slack_http, "slack http")
validate_k8s(docs, "slack http")
deployment_is_hardened(docs, "slack http", slack_http)
config_is_accepted_by_the_binary(docs, "slack http", {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x",
                                                      "CHAT_BRIDGE_SLACK__SIGNING_SECRET": "s" * 32})
svc_name = by_kind(docs, "Service")[0]["metadata"]["name"]
check(service_port_reaches(docs, "slack") == 3000,
      "slack http: Service port `slack` targets the container port of slack.listen (3000)")
routes = ingress_routes(docs)
for path in ("/slack/events", "/slack/interactive"):
    hits = [r for r in routes if r[0] == path]
    check(len(hits) == 1 and hits[0][1] == svc_name and service_port_reaches(docs, hits[0][2]) == 3000,
          f"slack http: Ingress {path} → Service {svc_name} port {hits[0][2] if hits else '?'} → container port 3000")
check(not any(r[0].startswith(("/api", "/metrics", "/healthz", "/readyz")) for r in routes),
      f"slack http: the Ingress exposes no /api/v1, /metrics or probes ({[r[0] for r in routes]})")
ing = by_kind(docs, "Ingress")[0]
check(ing["spec"]["ingressClassName"] == "nginx" and ing["spec"]["tls"][0]["secretName"] == "bridge-tls"
      and ing["metadata"]["annotations"] == slack_http["ingress"]["annotations"],
      "slack http: Ingress class, TLS and annotations as given")
np = by_kind(docs, "NetworkPolicy")[0]
check({"http", "slack"} <= {p["port"] for p in np["spec"]["ingress"][0]["ports"]},
      "slack http: the NetworkPolicy admits the Slack port")
test_pod_is_apart(docs, "slack http")
notes = chart_notes(slack_http)
check("https://bridge.example.com/slack/events" in notes and "https://bridge.example.com/slack/interactive" in notes
      and "SIGNING_SECRET" in notes, "slack http: NOTES.txt gives Slack's two request URLs and the signing secret")
check("Message Content" in chart_notes(prod), "discord: NOTES.txt says to switch on the Message Content intent")
check("Socket Mode" in chart_notes(None), "slack socket: NOTES.txt says Socket Mode needs no inbound route")
no_ing = copy.deepcopy(slack_http)
no_ing["ingress"]["enabled"] = False
check("WARNING: ingress.enabled is false" in chart_notes(no_ing),
      "slack http without an Ingress: NOTES.txt warns that Slack cannot reach the bridge")
nothing = copy.deepcopy(defaults)
nothing["ingress"] = {"enabled": True, "hosts": [{"host": "x.example.com"}]}
try:
    render(nothing, "ingress-with-nothing-to-route")
    check(False, "an Ingress with nothing to route is refused")
except helm.HelmError as e:
    check("needs something to expose" in str(e), "an Ingress with nothing to route is refused")
api_on_purpose = copy.deepcopy(slack_http)
api_on_purpose["ingress"]["extraPaths"] = [{"path": "/api/v1", "port": "http"}]
check(("/api/v1", svc_name, "http") in ingress_routes(render(api_on_purpose, "slack-http-plus-api")),
      "ingress.extraPaths exposes /api/v1 only when asked")

print("chart: a release with every optional object")
everything = copy.deepcopy(slack_http)
everything.update(
    serviceMonitor={**defaults["serviceMonitor"], "enabled": True},
    metrics={**defaults["metrics"], "prometheusRule": {**defaults["metrics"]["prometheusRule"], "enabled": True,
                                                       "alertLabels": {"team": "platform"}},
             "dashboard": {**defaults["metrics"]["dashboard"], "enabled": True}},
    topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "chat-bridge"}}}],
)
lint(everything, "everything")
docs = render(everything, "everything")
validate_k8s(docs, "everything")
kinds = sorted({d["kind"] for d in docs})
check(kinds == ["ConfigMap", "Deployment", "Ingress", "NetworkPolicy", "Pod", "PodDisruptionBudget",
                "PrometheusRule", "Secret", "Service", "ServiceAccount", "ServiceMonitor"],
      f"everything: every optional object rendered ({', '.join(kinds)})")
config_is_accepted_by_the_binary(docs, "everything", {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x",
                                                      "CHAT_BRIDGE_SLACK__SIGNING_SECRET": "s" * 32})
dash_cm = [c for c in by_kind(docs, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")]
dash = json.loads(dash_cm[0]["data"]["chat-bridge.json"]) if dash_cm else {}
check(bool(dash_cm) and dash_cm[0]["metadata"]["labels"].get("grafana_dashboard") == "1"
      and dash.get("uid") == "chat-bridge" and len(dash.get("panels", [])) >= 10,
      f"everything: the dashboard ConfigMap carries the Grafana sidecar label ({len(dash.get('panels', []))} panels)")
rule = by_kind(docs, "PrometheusRule")[0]
check(all(r["labels"].get("team") == "platform" for g in rule["spec"]["groups"] for r in g["rules"]),
      "everything: alertLabels reach every alert")
spread = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["topologySpreadConstraints"]
check([t["topologyKey"] for t in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
      "everything: the node spread and the zone spread both apply")

print("chart: the history UI (ui.enabled, its own Ingress with an auth-proxy annotation)")
ui = copy.deepcopy(with_users)
ui["ui"] = {"enabled": True, "ingress": {"enabled": True, "className": "nginx",
            "annotations": {"nginx.ingress.kubernetes.io/auth-url": "https://oauth2.example.com/oauth2/auth",
                            "nginx.ingress.kubernetes.io/auth-response-headers": "X-Auth-Request-Email"},
            "hosts": [{"host": "bridge.example.com"}], "tls": [{"secretName": "ui-tls", "hosts": ["bridge.example.com"]}]}}
ui["config"]["http"]["ui_auth_header"] = "X-Auth-Request-Email"
ui["config"]["http"]["ui_url"] = "https://bridge.example.com"
docs = renders(ui, "ui-with-ingress")
if docs is not None:
    cm = next(d for d in by_kind(docs, "ConfigMap") if "config.toml" in d.get("data", {}))
    toml_text = cm["data"]["config.toml"]
    check("ui = true" in toml_text and 'ui_auth_header = "X-Auth-Request-Email"' in toml_text,
          "ui.enabled sets http.ui in config.toml (with the proxy header)")
    ui_ing = [i for i in by_kind(docs, "Ingress") if i["metadata"]["name"].endswith("-ui")]
    check(len(ui_ing) == 1 and ui_ing[0]["metadata"]["annotations"]["nginx.ingress.kubernetes.io/auth-url"].startswith("https://oauth2"),
          "the UI gets its own Ingress carrying the auth-proxy annotations")
    paths = [p["path"] for p in ui_ing[0]["spec"]["rules"][0]["http"]["paths"]] if ui_ing else []
    check(paths == ["/ui"], f"the UI Ingress routes /ui only, never /api or /metrics ({paths})")
    check(not any(i["metadata"]["name"].endswith("-ui") for i in by_kind(renders(with_users, "ui-off") or [], "Ingress")),
          "no UI Ingress while ui.enabled is false")
    config_is_accepted_by_the_binary(docs, "ui-with-ingress", slack_tokens)

print("chart: production-like values")
lint(prod, "production")
docs = render(prod, "production")
validate_k8s(docs, "production")
secret = deployment_is_hardened(docs, "production", prod)
config_is_accepted_by_the_binary(docs, "production", {"CHAT_BRIDGE_DISCORD__TOKEN": "x"})
check(secret == "chat-bridge-secrets" and not by_kind(docs, "Secret"), "production: the existing Secret is referenced, none created")
check(len(by_kind(docs, "NetworkPolicy")) == 1 and len(by_kind(docs, "ServiceMonitor")) == 1,
      "production: NetworkPolicy and ServiceMonitor rendered")
stuck = [r for g in by_kind(docs, "PrometheusRule")[0]["spec"]["groups"] for r in g["rules"]
         if r["alert"] == "ChatBridgeTurnStuck"]
check(len(stuck) == 1 and stuck[0]["expr"].endswith("> 5400"),
      "production: ChatBridgeTurnStuck follows config.liveness.wall (90m = 5400 s)")
pdb = by_kind(docs, "PodDisruptionBudget")[0]
check(pdb["spec"]["minAvailable"] == 2, "production: PDB minAvailable 2")
test_pod_is_apart(docs, "production (ingressFrom only the monitoring namespace)")
long_name = copy.deepcopy(prod)
long_name["nameOverride"] = "b" * 63
test_pod_is_apart(render(long_name, "production, a 63-character nameOverride"), "a 63-character nameOverride")

print("chart: the schema refuses bad values")
chart = helm.Chart.load(CHART)
for label, mutate in [
    ("replicaCount 0", lambda v: v.update(replicaCount=0)),
    ("an unknown platform", lambda v: v["config"]["service"].update(platform="irc")),
    ("a bad duration", lambda v: v["config"]["service"].update(drain_timeout="soon")),
    ("runAsNonRoot false", lambda v: v["podSecurityContext"].update(runAsNonRoot=False)),
    ("access.open not a boolean", lambda v: v["config"]["access"].update(open="yes")),
    ("an unknown access key", lambda v: v["config"]["access"].update(opne=True)),
    ("an unknown slack.mode", lambda v: v["config"]["slack"].update(mode="htp")),
    ("an unknown alert key", lambda v: v["metrics"]["prometheusRule"]["alerts"]["daemonDown"].update(fro="1m")),
    ("an alert severity that is not critical/warning/info", lambda v: v["metrics"]["prometheusRule"]["alerts"]["stalls"].update(severity="page")),
    ("an ingress path to an unknown port", lambda v: v["ingress"].update(extraPaths=[{"path": "/x", "port": "admin"}])),
    ("an unknown ingress key", lambda v: v["ingress"].update(host="x")),
]:
    bad = copy.deepcopy(defaults)
    mutate(bad)
    try:
        chart.validate_schema(bad)
        check(False, f"schema refuses {label}")
    except helm.HelmError as e:
        check(True, f"schema refuses {label} ({str(e).splitlines()[0][:80]})")

print("chart: the render refuses what the binary would refuse")
ui_ing_only = copy.deepcopy(with_users)
ui_ing_only["ui"] = {"enabled": False, "ingress": {"enabled": True, "hosts": [{"host": "x.example.com"}]}}
render_fails(ui_ing_only, "ui.ingress without ui.enabled", "ui.ingress.enabled needs ui.enabled")
for key in ("daemon.token", "slack.bot_token", "slack.app_token", "slack.signing_secret", "discord.token", "http.api_token"):
    bad = copy.deepcopy(with_users)
    section, name = key.split(".")
    bad["config"].setdefault(section, {})[name] = "x"
    render_fails(bad, f"config.{key} set to a token", f"config.{key}",
                 "secrets belong in secrets.values or existingSecret, never in config",
                 f"CHAT_BRIDGE_{section.upper()}__{name.upper()}")
for grace, drain, ok in [(10, "20s", False), (24, "20s", False), (25, "20s", True), (94, "1m30s", False),
                         (95, "1m30s", True), (5404, 5400, False), (5405, "5400", True), (6, "1500ms", False),
                         (7, "1500ms", True)]:
    v = copy.deepcopy(with_users)
    v["terminationGracePeriodSeconds"] = grace
    v["config"]["service"]["drain_timeout"] = drain
    label = f"terminationGracePeriodSeconds {grace} with drain_timeout {drain!r}"
    if ok:
        docs = renders(v, label)
        check(docs is not None and by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace,
              f"{label}: renders (≥ drain_timeout + 5 s)")
    else:
        render_fails(v, label, "terminationGracePeriodSeconds", "config.service.drain_timeout", "+ 5 s")
clash = copy.deepcopy(slack_http)
clash["config"]["slack"]["listen"] = "0.0.0.0:8080"
render_fails(clash, "slack.listen on http.listen's port", "config.slack.listen (0.0.0.0:8080)",
             "config.http.listen (0.0.0.0:8080)", "same port 8080")
clash_default = copy.deepcopy(slack_http)
del clash_default["config"]["slack"]["listen"]
clash_default["config"]["http"]["listen"] = "0.0.0.0:3000"
render_fails(clash_default, "http.listen on the default slack.listen port", "config.slack.listen (0.0.0.0:3000)",
             "config.http.listen (0.0.0.0:3000)")

print("chart: durations as the binary reads them")
samples = ["500ms", "20s", "2m", "1h", "1h30m", "1m30s", "30s1m", "1h0m0s5ms", "0", "5400", 5400, 0,
           "1.5h", "1.5s", "soon", "", "s", "10x", "-1s", "m5", "1h 30m", "20 s", "5400.0", "1d", -5, 5400.5, True]
for sample in samples:
    v = copy.deepcopy(defaults)
    v["config"]["service"]["leader_retry"] = sample
    try:
        chart.validate_schema(v)
        schema_ok = True
    except helm.HelmError:
        schema_ok = False
    toml_value = json.dumps(sample) if not isinstance(sample, bool) else "true"
    out = check_config(f'[access]\nopen = true\n[http]\nlisten = "0.0.0.0:8080"\n'
                       f'[service]\nplatform = "slack"\nleader_retry = {toml_value}\n',
                       {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x", "CHAT_BRIDGE_SLACK__APP_TOKEN": "xapp-x"})
    binary_ok = out.returncode == 0
    check(schema_ok == binary_ok == (duration_ms(sample) is not None),
          f"duration {sample!r}: the schema {'accepts' if schema_ok else 'refuses'} it, "
          f"the binary {'accepts' if binary_ok else 'refuses'} it")
numbers = copy.deepcopy(with_users)
numbers["config"]["service"].update(drain_timeout=90, leader_retry="1m30s", outbox_workers=4)
numbers["config"]["liveness"].update(idle=300, wall="1h30m")
numbers["terminationGracePeriodSeconds"] = 95
numbers["metrics"] = copy.deepcopy(defaults["metrics"])
numbers["metrics"]["prometheusRule"]["enabled"] = True
docs = renders(numbers, "durations as numbers and sums")
if docs is not None:
    config_is_accepted_by_the_binary(docs, "drain_timeout 90, idle 300, wall 1h30m, outbox_workers 4", slack_tokens)
    service = tomllib.loads(by_kind(docs, "ConfigMap")[0]["data"]["config.toml"])["service"]
    check(type(service["drain_timeout"]) is int and type(service["outbox_workers"]) is int,
          f"numbers reach config.toml as integers (drain_timeout = {service['drain_timeout']!r}, "
          f"outbox_workers = {service['outbox_workers']!r})")
    stuck = [r for g in by_kind(docs, "PrometheusRule")[0]["spec"]["groups"] for r in g["rules"]
             if r["alert"] == "ChatBridgeTurnStuck"]
    check(len(stuck) == 1 and stuck[0]["expr"].endswith("> 5400"),
          f"ChatBridgeTurnStuck reads wall 1h30m as 5400 s ({stuck[0]['expr'][-12:] if stuck else '?'})")
wall = copy.deepcopy(with_users)
wall["config"]["liveness"]["wall"] = "1h30m"
wall["metrics"] = copy.deepcopy(numbers["metrics"])
docs = renders(wall, "wall 1h30m")
stuck = [r for g in by_kind(docs or [], "PrometheusRule")[0]["spec"]["groups"] for r in g["rules"]
         if r["alert"] == "ChatBridgeTurnStuck"] if docs else []
check(len(stuck) == 1 and stuck[0]["expr"].endswith("> 5400"),
      f"ChatBridgeTurnStuck reads wall 1h30m as 5400 s, not 60 ({stuck[0]['expr'][-8:] if stuck else '?'})")

print("chart: the release notes warn when no token is set")
for label, v, needs in [
    ("slack socket", with_users, ["CHAT_BRIDGE_SLACK__BOT_TOKEN", "CHAT_BRIDGE_SLACK__APP_TOKEN", "CHAT_BRIDGE_DATABASE__URL"]),
    ("slack http", slack_http, ["CHAT_BRIDGE_SLACK__BOT_TOKEN", "CHAT_BRIDGE_SLACK__SIGNING_SECRET"]),
    ("discord", {**copy.deepcopy(prod), "secrets": {"existingSecret": "", "values": {}}}, ["CHAT_BRIDGE_DISCORD__TOKEN"]),
]:
    notes = chart_notes(v)
    warning = notes.split("WARNING: no token is set", 1)[1].split("\n\n")[0] if "WARNING: no token is set" in notes else ""
    others = [k for k in ("CHAT_BRIDGE_SLACK__APP_TOKEN", "CHAT_BRIDGE_SLACK__SIGNING_SECRET", "CHAT_BRIDGE_DISCORD__TOKEN")
              if k not in needs]
    check(bool(warning) and all(k in warning for k in needs) and not any(k in warning for k in others),
          f"{label}, no Secret: NOTES.txt warns that no token is set and names {', '.join(needs)}")
given = copy.deepcopy(with_users)
given["secrets"]["values"] = {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x", "CHAT_BRIDGE_SLACK__APP_TOKEN": "xapp-x",
                              "CHAT_BRIDGE_DATABASE__URL": "postgres://db/chat"}
check("WARNING: no token" not in chart_notes(given) and "lacks" not in chart_notes(given),
      "secrets.values with the mode's tokens: no warning")
partial = copy.deepcopy(with_users)
partial["secrets"]["values"] = {"CHAT_BRIDGE_SLACK__BOT_TOKEN": "xoxb-x"}
check("secrets.values lacks CHAT_BRIDGE_SLACK__APP_TOKEN, CHAT_BRIDGE_DATABASE__URL" in " ".join(chart_notes(partial).split()),
      "secrets.values without the app token: NOTES.txt names what is missing")
check("WARNING: no token" not in chart_notes(prod), "an existingSecret: no token warning (the chart cannot see it)")

print("chart: a sidecar agent through agent-host")
sidecar = copy.deepcopy(with_users)
sidecar["agent"] = {"enabled": True, "image": {"repository": "ghcr.io/example/qwen-code", "tag": "0.24.4"},
                    "command": ["qwen", "--acp"], "env": [{"name": "OPENAI_MODEL", "value": "qwen3-coder"}]}
lint(sidecar, "agent sidecar")
docs = render(sidecar, "agent sidecar")
validate_k8s(docs, "agent sidecar")
deployment_is_hardened(docs, "agent sidecar", sidecar)
pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
agent = [c for c in pod["containers"] if c["name"] == "agent"]
check(len(agent) == 1 and agent[0]["command"][:5] == ["/opt/agent-host/chat-bridge", "agent-host", "--listen", "127.0.0.1:7071", "--cwd"]
      and agent[0]["command"][-3:] == ["--", "qwen", "--acp"],
      "agent sidecar: agent-host on loopback runs the agent's command")
token = [e for e in agent[0]["env"] if e["name"] == "CHAT_BRIDGE_AGENT_HOST_TOKEN"] if agent else []
check(token and token[0]["valueFrom"]["secretKeyRef"]["key"] == "CHAT_BRIDGE_DAEMON__TOKEN",
      "agent sidecar: agent-host's token is the bridge's CHAT_BRIDGE_DAEMON__TOKEN")
mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in pod["containers"]}
check(mounts.get("agent", {}).get("work") == "/work" and mounts["chat-bridge"].get("work") == "/work",
      "agent sidecar: the workspace volume is shared at /work")
check([c["name"] for c in pod.get("initContainers", [])] == ["agent-host-binary"],
      "agent sidecar: an init container copies the chat-bridge binary for agent-host")
config = by_kind(docs, "ConfigMap")[0]["data"]["config.toml"]
check('url = "ws://127.0.0.1:7071/acp"' in config, "agent sidecar: the bridge's daemon.url is agent-host on loopback")
config_is_accepted_by_the_binary(docs, "agent sidecar", {**slack_tokens, "CHAT_BRIDGE_DAEMON__TOKEN": "a-long-enough-token-for-the-host"})
both = copy.deepcopy(sidecar)
both["config"]["daemon"]["url"] = "ws://elsewhere:4000/acp"
render_fails(both, "agent.enabled with config.daemon.url", "leave config.daemon.url and config.daemon.command unset")
no_image = copy.deepcopy(sidecar)
no_image["agent"]["image"]["repository"] = ""
try:
    chart.validate_schema(no_image)
    check(False, "schema refuses agent.enabled without an image")
except helm.HelmError:
    check(True, "schema refuses agent.enabled without an image")
print("chart: no sidecar by default")
check(all(c["name"] != "agent" for c in by_kind(render(with_users, "default"), "Deployment")[0]["spec"]["template"]["spec"]["containers"]),
      "defaults: no agent sidecar")

print("chart: two projects on two platforms")
team = copy.deepcopy(with_users)
team["config"]["service"]["platforms"] = ["slack", "discord"]
team["config"]["discord"] = {"allowed_roles": ["112233445566778899"]}
team["config"]["default_project"] = "api"
team["projects"] = [
    {"name": "api", "channels": ["slack:C0API00001"],
     "daemon": {"url": "wss://api-daemon.internal:8080/acp", "mode": "default"},
     "token": {"secretName": "api-daemon", "key": "token"},
     "approvals": {"approvers": ["U0123ABCD"]}, "liveness": {"idle": 300}},
    {"name": "mobile", "channels": ["discord:998877665544332211"],
     "daemon": {"url": "ws://mobile-agent:4000/acp"},
     "token": {"key": "MOBILE_DAEMON_TOKEN"}},
    {"name": "web", "channels": ["slack:C0WEB00002"], "daemon": {"cwd": "/work/web"}},
]
lint(team, "two projects")
docs = render(team, "two projects")
validate_k8s(docs, "two projects")
deployment_is_hardened(docs, "two projects", team)
text = by_kind(docs, "ConfigMap")[0]["data"]["config.toml"]
cfg = tomllib.loads(text)
check([p["name"] for p in cfg.get("projects", [])] == ["api", "mobile", "web"] and "daemon" not in cfg
      and cfg["default_project"] == "api",
      "two projects: rendered as [[projects]], config.daemon dropped, default_project kept")
check(cfg["service"].get("platforms") == ["slack", "discord"] and "platform" not in cfg["service"],
      "two projects: service.platforms replaces service.platform")
tokens = "/var/run/chat-bridge/projects"
check(cfg["projects"][0]["daemon"].get("token_file") == f"{tokens}/api/token"
      and cfg["projects"][1]["daemon"].get("token_file") == f"{tokens}/mobile/token"
      and "token_file" not in cfg["projects"][2]["daemon"] and not re.search(r"^\s*token\s*=", text, re.M),
      "two projects: each daemon's token is its own mounted file, never in the config")
check(cfg["projects"][0]["liveness"]["idle"] == 300 and isinstance(cfg["projects"][0]["liveness"]["idle"], int),
      "two projects: whole numbers in a project's sections stay integers")
pod = by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]
vol = [v for v in pod["volumes"] if v["name"] == "project-tokens"]
sources = vol[0]["projected"]["sources"] if vol else []
check([(s_["secret"]["name"], s_["secret"]["items"]) for s_ in sources]
      == [("api-daemon", [{"key": "token", "path": "api/token"}]),
          ("chat-bridge", [{"key": "MOBILE_DAEMON_TOKEN", "path": "mobile/token"}])],
      "two projects: a projected volume maps each project's Secret key to <project>/token")
mount = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "project-tokens"]
check(len(mount) == 1 and mount[0]["mountPath"] == tokens and mount[0].get("readOnly") is True,
      "two projects: the tokens are mounted read-only where token_file points")
# The binary reads the rendered file as it would in the pod: the token files it names exist there.
with tempfile.TemporaryDirectory() as mounted:
    for name in ("api", "mobile"):
        os.makedirs(os.path.join(mounted, name))
        with open(os.path.join(mounted, name, "token"), "w") as f:
            f.write(f"token-of-{name}-daemon\n")
    os.makedirs(os.path.join(mounted, "web-repo"))
    out = check_config(text.replace(tokens, mounted).replace("/work/web", os.path.join(mounted, "web-repo")),
                       {**slack_tokens, "CHAT_BRIDGE_DISCORD__TOKEN": "x"})
    check(out.returncode == 0 and "platforms slack, discord" in out.stdout
          and "projects api (wss://api-daemon.internal:8080/acp), mobile (ws://mobile-agent:4000/acp), web (the built-in shell agent)" in out.stdout,
          f"chat-bridge check-config accepts the two-project, two-platform config.toml: {out.stdout.strip() or out.stderr.strip()}")
notes = chart_notes({**copy.deepcopy(team), "secrets": {"existingSecret": "", "values": {}}})
check("CHAT_BRIDGE_DISCORD__TOKEN" in notes and "CHAT_BRIDGE_SLACK__APP_TOKEN" in notes,
      "two platforms, no Secret: NOTES.txt names both platforms' tokens")
clash = copy.deepcopy(team)
clash["config"]["daemon"] = {"url": "ws://one-daemon:4000/acp"}
render_fails(clash, "projects with config.daemon.url", "config.daemon.url is set alongside projects")
twice = copy.deepcopy(team)
twice["projects"][1]["name"] = "api"
render_fails(twice, "two projects named api", '"api" is the name of two projects')
nosuch = copy.deepcopy(team)
nosuch["config"]["default_project"] = "nosuch"
render_fails(nosuch, "default_project naming no project", 'config.default_project "nosuch" names no project',
             "api, mobile, web")
alone = copy.deepcopy(with_users)
alone["config"]["default_project"] = "api"
render_fails(alone, "default_project without projects", 'config.default_project "api" but projects is empty')
in_config = copy.deepcopy(team)
in_config["projects"][0]["daemon"]["token"] = "hunter2"
try:
    chart.validate_schema(in_config)
    check(False, "schema refuses a project's daemon token in values")
except helm.HelmError:
    check(True, "schema refuses a project's daemon token in values (it comes from its Secret key)")
check(not [v for v in by_kind(render(with_users, "default"), "Deployment")[0]["spec"]["template"]["spec"]["volumes"]
           if v["name"] == "project-tokens"], "defaults: no project token volume")

print("docs/openapi.json")
with open(os.path.join(ROOT, "docs", "openapi.json")) as f:
    spec = json.load(f)
try:
    validate_openapi(spec)
    check(True, "docs/openapi.json is a valid OpenAPI 3.1 document")
except Exception as e:  # noqa: BLE001
    check(False, f"docs/openapi.json: {e}")

if failures:
    print(f"\n{len(failures)} chart check(s) failed")
    sys.exit(1)
print("\nchart checks passed")
