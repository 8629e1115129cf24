"""deploy/k8s: the example overlay rendered as `kubectl apply -k` would send it, every object
checked against the Kubernetes API's own schemas (kubernetes-validate), and the properties
the gateway's behaviour depends on: probes on real routes, a grace period longer than the
drain, an ingress that lets streams through, unprivileged pods, and a config that passes
`gateway check-config` with exactly the Secret's variables."""

from __future__ import annotations

import ast
import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gateway.config import Config
from gateway.config import parse_config
from gateway.server.runner import LAST_REQUESTS_GRACE_S
from tests.deploy.kustomize import Obj
from tests.deploy.kustomize import render

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy/k8s/overlays/example"
DOCKERFILE = ROOT / "deploy/Dockerfile"
# The oldest Kubernetes release still widely run, and the newest kubernetes-validate ships.
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
NGINX = "nginx.ingress.kubernetes.io/"


def one(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def generated(objects: list[Obj], kind: str, name: str) -> Obj:
    """A generated ConfigMap or Secret: its name is `name` plus a content-hash suffix, or
    `name` itself (the config's ConfigMap: edited in place, reloaded by running pods)."""
    found = [
        o
        for o in objects
        if o["kind"] == kind and name in (o["metadata"]["name"], o["metadata"]["name"][:-11])
    ]
    assert len(found) == 1, f"{kind} {name}-<hash>: {len(found)} found"
    return found[0]


def gateway_container(objects: list[Obj]) -> Obj:
    pod = one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "gateway"]
    return container


def secret_env(objects: list[Obj]) -> dict[str, str]:
    secret = generated(objects, "Secret", "gateway-secrets")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def config_text(objects: list[Obj]) -> str:
    text: str = generated(objects, "ConfigMap", "gateway-config")["data"]["config.yaml"]
    return text


def served_config(objects: list[Obj]) -> Config:
    """The config as a pod loads it: the ConfigMap's file with the Secret's environment."""
    return parse_config(config_text(objects), secret_env(objects), "config.yaml")


def port_number(container: Obj, port: int | str) -> int:
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in container["ports"] if p["name"] == port]
    return int(number)


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(OVERLAY)


def test_the_renderer_agrees_with_kubectl_kustomize(objects: list[Obj]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not on PATH: the renderer is checked against it where it is")
    out = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    theirs = [doc for doc in yaml.safe_load_all(out.stdout) if doc]

    def key(o: Obj) -> tuple[str, str, str]:
        return (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])

    assert sorted(map(key, objects)) == sorted(map(key, theirs))
    assert {key(o): o for o in objects} == {key(o): o for o in theirs}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_object_matches_the_kubernetes_schema(objects: list[Obj], version: str) -> None:
    problems = []
    validated = set()
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # a CRD: no schema in kubernetes-validate; checked below by hand
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            problems.append(f"{obj['kind']} {obj['metadata']['name']}: {path}: {exc.message}")
        validated.add(obj["kind"])
    assert problems == []
    assert validated == {
        "Namespace", "ConfigMap", "Secret", "Deployment", "Service", "HorizontalPodAutoscaler",
        "PodDisruptionBudget", "Ingress", "PersistentVolumeClaim", "NetworkPolicy",
    }  # fmt: skip


def test_strict_validation_catches_a_misspelt_field(objects: list[Obj]) -> None:
    """The schema check above can fail: a field the API does not know is an error."""
    service = one(objects, "Service", "gateway")
    broken = {**service, "spec": {**service["spec"], "selecter": {"a": "b"}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


def test_the_service_monitor_scrapes_the_gateway_metrics(objects: list[Obj]) -> None:
    monitor = one(objects, "ServiceMonitor", "gateway")
    service = one(objects, "Service", "gateway")
    redis = one(objects, "Service", "gateway-redis")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert set(monitor["spec"]) == {"selector", "endpoints"}
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert labels_match(selector, service["metadata"]["labels"])
    assert not labels_match(selector, redis["metadata"]["labels"])
    (endpoint,) = monitor["spec"]["endpoints"]
    assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"  # DESIGN.md: `GET /metrics`, Prometheus exposition
    assert 0 < seconds(endpoint["scrapeTimeout"]) <= seconds(endpoint["interval"])


def seconds(duration: str) -> int:
    """A Prometheus duration as the operator's manifests write it here: `15s`."""
    match = re.fullmatch(r"(\d+)s", duration)
    assert match is not None, duration
    return int(match[1])


def test_probes_ask_the_health_routes_on_the_served_port(objects: list[Obj]) -> None:
    container = gateway_container(objects)
    config = served_config(objects)
    kinds = ("startupProbe", "readinessProbe", "livenessProbe")
    probes = {kind: container[kind]["httpGet"] for kind in kinds}
    assert probes["readinessProbe"]["path"] == "/readyz"
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    for probe in probes.values():
        assert port_number(container, probe["port"]) == config.server.port
    # /readyz pings the store for up to 2 s: a shorter probe timeout would fail a slow ping
    # as if the pod were down instead of letting the gateway say so.
    assert container["readinessProbe"]["timeoutSeconds"] > 2
    service = one(objects, "Service", "gateway")
    (port,) = service["spec"]["ports"]
    assert port_number(container, port["targetPort"]) == config.server.port


def test_termination_grace_outlasts_the_pause_and_the_drain(objects: list[Obj]) -> None:
    pod = one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]
    command = gateway_container(objects)["lifecycle"]["preStop"]["exec"]["command"]
    venv = re.search(r"python -m venv (?:--\S+ )*(\S+)", DOCKERFILE.read_text())
    assert venv is not None
    assert command[:2] == [f"{venv[1]}/bin/python", "-c"]  # the image has no shell or sleep
    pause = preStop_sleep_seconds(command[2])
    assert pause >= 5  # long enough for the ingress controller to drop the endpoint
    drain = served_config(objects).server.shutdown_grace_s + LAST_REQUESTS_GRACE_S
    assert pod["terminationGracePeriodSeconds"] > pause + drain


def preStop_sleep_seconds(code: str) -> float:
    """N from exactly `import time; time.sleep(N)`: anything else is not a plain pause."""
    tree = ast.parse(code)
    assert [ast.dump(s) for s in tree.body[:1]] == [ast.dump(ast.parse("import time").body[0])]
    (call,) = tree.body[1:]
    assert isinstance(call, ast.Expr)
    assert isinstance(call.value, ast.Call)
    assert ast.unparse(call.value.func) == "time.sleep"
    (arg,) = call.value.args
    assert isinstance(arg, ast.Constant)
    assert isinstance(arg.value, int | float)
    return float(arg.value)


def nginx_size_bytes(size: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kKmMgG]?)", size).groups()  # type: ignore[union-attr]
    return int(number) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]


def test_the_ingress_lets_streams_through(objects: list[Obj]) -> None:
    ingress = one(objects, "Ingress", "gateway")
    config = served_config(objects)
    notes: dict[str, str] = ingress["metadata"]["annotations"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert notes[NGINX + "proxy-buffering"] == "off"
    assert notes[NGINX + "proxy-request-buffering"] == "off"
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        seconds = int(notes[NGINX + timeout])
        assert seconds >= config.routing.deadline_s  # a whole request fits, silences or not
        assert seconds > config.server.keepalive_s
        assert seconds > config.server.commit_after_s
    assert nginx_size_bytes(notes[NGINX + "proxy-body-size"]) == config.server.max_body_bytes
    service = one(objects, "Service", "gateway")
    port_names = [p["name"] for p in service["spec"]["ports"]]
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert [rule["host"] for rule in ingress["spec"]["rules"]] == ["llm.example.org"]
    assert ingress["spec"]["tls"][0]["hosts"] == ["llm.example.org"]
    for path in paths:
        assert path["backend"]["service"]["name"] == service["metadata"]["name"]
        assert path["backend"]["service"]["port"]["name"] in port_names
        for internal in ("/metrics", "/healthz", "/readyz"):  # operators' routes stay inside
            assert not internal.startswith(path["path"])


def test_pods_run_unprivileged_with_pinned_images(objects: list[Obj]) -> None:
    for deployment in [o for o in objects if o["kind"] == "Deployment"]:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context.get("privileged", False) is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            for bound in ("requests", "limits"):
                assert set(container["resources"][bound]) == {"cpu", "memory"}
            assert not container["image"].endswith(":latest")
    gateway = gateway_container(objects)
    assert gateway["image"] == "registry.example.com/platform/gateway:0.1.0"
    redis_pod = one(objects, "Deployment", "gateway-redis")["spec"]["template"]["spec"]
    redis_image = redis_pod["containers"][0]["image"]
    assert re.fullmatch(r"redis:\d+\.\d+\.\d+-\w+@sha256:[0-9a-f]{64}", redis_image)
    user = re.search(r"^USER (\d+):(\d+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert user is not None
    context = one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (int(user[1]), int(user[2]))


def test_the_overlay_patches_reach_the_objects(objects: list[Obj]) -> None:
    resources = gateway_container(objects)["resources"]
    assert resources["requests"] == {"cpu": "1", "memory": "512Mi"}
    hpa = one(objects, "HorizontalPodAutoscaler", "gateway")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 20)
    namespaces = {o["metadata"].get("namespace") for o in objects if o["kind"] != "Namespace"}
    assert namespaces == {one(objects, "Namespace", "llm-gateway")["metadata"]["name"]}


def test_workload_selectors_and_scaling_fit_together(objects: list[Obj]) -> None:
    deployment = one(objects, "Deployment", "gateway")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    assert labels_match(deployment["spec"]["selector"]["matchLabels"], pod_labels)
    assert labels_match(one(objects, "Service", "gateway")["spec"]["selector"], pod_labels)
    pdb = one(objects, "PodDisruptionBudget", "gateway")
    assert labels_match(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    hpa = one(objects, "HorizontalPodAutoscaler", "gateway")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "gateway")
    # Scaled down to the minimum, a voluntary eviction still leaves a pod serving.
    assert hpa["spec"]["minReplicas"] > pdb["spec"]["maxUnavailable"]
    redis_pods = one(objects, "Deployment", "gateway-redis")["spec"]["template"]["metadata"]
    assert not labels_match(deployment["spec"]["selector"]["matchLabels"], redis_pods["labels"])


def test_the_pod_gets_its_config_secrets_and_store(objects: list[Obj]) -> None:
    container = gateway_container(objects)
    pod = one(objects, "Deployment", "gateway")["spec"]["template"]["spec"]
    config_map = generated(objects, "ConfigMap", "gateway-config")
    secret = generated(objects, "Secret", "gateway-secrets")
    (source,) = container["envFrom"]
    assert source["secretRef"]["name"] == secret["metadata"]["name"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_volume = volumes[mounts["/etc/gateway"]["name"]]
    assert config_volume["configMap"]["name"] == config_map["metadata"]["name"]
    # reloaded without a rollout: a stable ConfigMap name (an edit is not a new pod spec),
    # mounted as a directory (a subPath mount never sees an update)
    assert config_map["metadata"]["name"] == "gateway-config"
    assert "subPath" not in mounts["/etc/gateway"]
    args = container["args"]
    assert args[args.index("--config") + 1] == "/etc/gateway/config.yaml"
    assert args[args.index("--host") + 1] == "0.0.0.0"  # reachable from the Service
    config = served_config(objects)
    assert config.store.url == "redis://gateway-redis:6379/0"
    assert config.auth.master_key.reveal() == secret_env(objects)["GATEWAY_MASTER_KEY"]
    redis = one(objects, "Service", "gateway-redis")
    assert [p["port"] for p in redis["spec"]["ports"]] == [6379]
    redis_pod = one(objects, "Deployment", "gateway-redis")["spec"]["template"]
    assert labels_match(redis["spec"]["selector"], redis_pod["metadata"]["labels"])
    policy = one(objects, "NetworkPolicy", "gateway-redis")
    (allowed,) = policy["spec"]["ingress"][0]["from"]
    gateway_labels = one(objects, "Deployment", "gateway")["spec"]["template"]["metadata"]
    assert labels_match(allowed["podSelector"]["matchLabels"], gateway_labels["labels"])


def check_config(
    tmp_path: Path, text: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", **env},  # the pod's variables and no others
        cwd=ROOT,
    )


def test_the_configmap_config_passes_check_config(objects: list[Obj], tmp_path: Path) -> None:
    env = secret_env(objects)
    done = check_config(tmp_path, config_text(objects), env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok: ")
    # Nothing secret is baked into the ConfigMap: without the Secret it does not load.
    bare = check_config(tmp_path, config_text(objects), {})
    assert bare.returncode == 1
    for path in ("auth.master_key", "providers[0].keys[0].key", "providers[1].keys[0].key"):
        assert path + ": environment variable" in bare.stdout
    for value in env.values():
        assert value not in config_text(objects)


def test_the_example_secrets_are_marked_as_placeholders(objects: list[Obj]) -> None:
    for name, value in secret_env(objects).items():
        assert "example" in value, name
        assert value.endswith("replace-me"), name
