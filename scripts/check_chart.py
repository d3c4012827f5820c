"""The chart checks behind scripts/check-chart. Each check prints what it verified; any failure
exits 1 with the reason."""

import copy
import json
import os
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
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            # A Prometheus Operator CRD: not in the Kubernetes schemas; check what it must say.
            ep = doc["spec"]["endpoints"][0]
            check(ep["port"] == "http" and ep["path"] == "/metrics", f"{name} scrapes /metrics ({label})")
            continue
        try:
            kubernetes_validate.validate(doc, KUBE, strict=True)
            check(True, f"kubernetes-validate --strict {name} ({label})")
        except Exception as e:  # noqa: BLE001 - the validator's errors carry the reason
            check(False, f"kubernetes-validate --strict {name} ({label}): {e}")


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


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
    check(cfg["http"]["listen"].endswith(":8080"), f"config.toml listens on the container port ({label})")
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
    drain = values["config"]["service"]["drain_timeout"]
    check(grace > int(drain.rstrip("s")), f"terminationGracePeriodSeconds {grace} > drain_timeout {drain} ({label})")
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

print("chart: production-like values")
lint(prod, "production")
docs = render(prod, "production")
validate_k8s(docs, "production")
secret = deployment_is_hardened(docs, "production", prod)
config_is_accepted_by_the_binary(docs, "production", {"CHAT_BRIDGE_DISCORD__TOKEN": "x"})
check(secret == "chat-bridge-secrets" and not by_kind(docs, "Secret"), "production: the existing Secret is referenced, none created")
check(len(by_kind(docs, "NetworkPolicy")) == 1 and len(by_kind(docs, "ServiceMonitor")) == 1,
      "production: NetworkPolicy and ServiceMonitor rendered")
pdb = by_kind(docs, "PodDisruptionBudget")[0]
check(pdb["spec"]["minAvailable"] == 2, "production: PDB minAvailable 2")

print("chart: the schema refuses bad values")
chart = helm.Chart.load(CHART)
for label, mutate in [
    ("a token in config", lambda v: v["config"].setdefault("discord", {}).update(token="x")),
    ("replicaCount 0", lambda v: v.update(replicaCount=0)),
    ("an unknown platform", lambda v: v["config"]["service"].update(platform="irc")),
    ("a bad duration", lambda v: v["config"]["service"].update(drain_timeout="soon")),
    ("runAsNonRoot false", lambda v: v["podSecurityContext"].update(runAsNonRoot=False)),
    ("access.open not a boolean", lambda v: v["config"]["access"].update(open="yes")),
    ("an unknown access key", lambda v: v["config"]["access"].update(opne=True)),
    ("an unknown slack.mode", lambda v: v["config"]["slack"].update(mode="htp")),
]:
    bad = copy.deepcopy(defaults)
    mutate(bad)
    try:
        chart.validate_schema(bad)
        check(False, f"schema refuses {label}")
    except helm.HelmError as e:
        check(True, f"schema refuses {label} ({str(e).splitlines()[0][:80]})")

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
