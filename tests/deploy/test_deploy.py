"""deploy/: the container recipe and the Kubernetes manifests (docs/kubernetes.md), checked without a
container tool or a cluster: each manifest against the API's fields (tests/deploy/k8s_schema.py),
the objects against each other (names, labels, ports, the Secret, the scheduler's --pods list),
and every command line against the real phobos-pod and phobos-sched parsers."""

from __future__ import annotations

import copy
import json
import re
import shlex
import tomllib

import pytest

from common.paths import repo_file
from pod.cli import build_parser as pod_parser
from scheduler.run_cli import build_parser as scheduler_parser
from tests.deploy import k8s_schema
from tests.extras import extras_required

if extras_required():
    import yaml
else:
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (the extras lock, docs/torch.md)")

K8S = repo_file("deploy/k8s")
PYPROJECT = tomllib.loads(repo_file("pyproject.toml").read_text())


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict]:
    found = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            found[(doc["kind"], doc["metadata"]["name"])] = doc | {"_file": path.name}
    return found


def _one(objects, kind: str) -> dict:
    (doc,) = [d for (k, _), d in objects.items() if k == kind]
    return doc


def test_every_manifest_has_only_known_fields_of_the_right_types(objects):
    kinds = sorted(kind for kind, _ in objects)
    assert kinds == ["Job", "PersistentVolumeClaim", "Secret", "Service", "StatefulSet"]
    for doc in objects.values():
        clean = {k: v for k, v in doc.items() if k != "_file"}
        assert k8s_schema.problems(clean, doc["_file"]) == []


@pytest.mark.parametrize("mutate,problem", [
    (lambda d: d["spec"]["template"]["spec"].update(contianers=[]), "unknown field"),
    (lambda d: d["spec"].update(replicas="2"), "spec.replicas: expected int, got str"),
    (lambda d: d["spec"]["template"]["spec"].pop("containers"), "spec.template.spec.containers is required"),
    (lambda d: d.update(apiVersion="apps/v1beta1"), "unknown apiVersion/kind"),
    (lambda d: d["spec"]["template"]["metadata"]["labels"].update(tier=3), "map of strings"),
])
def test_the_schema_check_catches_mistakes(objects, mutate, problem):
    doc = {k: v for k, v in copy.deepcopy(_one(objects, "StatefulSet")).items() if k != "_file"}
    mutate(doc)
    assert any(problem in line for line in k8s_schema.problems(doc, "pods.yaml"))


def test_the_headless_service_selects_the_statefulsets_pods(objects):
    service, pods = _one(objects, "Service"), _one(objects, "StatefulSet")
    labels = pods["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"  # headless: one DNS name per pod
    assert pods["spec"]["serviceName"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert pods["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (container,) = pods["spec"]["template"]["spec"]["containers"]
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] in port_names
    assert service_port["port"] == port_names[service_port["targetPort"]]


def test_the_pods_command_is_phobos_pods_listening_on_the_container_port(objects):
    (container,) = _one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"]
    args = pod_parser().parse_args(container["args"])  # a bad flag exits here (SystemExit)
    host, port = args.listen.rsplit(":", 1)
    assert host == "0.0.0.0" and int(port) == container["ports"][0]["containerPort"]
    assert args.storage_root == ["/data"] and args.device == "0"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_the_scheduler_job_names_every_replica_by_its_stable_name(objects):
    job, pods, service = _one(objects, "Job"), _one(objects, "StatefulSet"), _one(objects, "Service")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["phobos-sched"]
    args = scheduler_parser().parse_args(container["args"])
    port = service["spec"]["ports"][0]["port"]
    want = [f"{pods['metadata']['name']}-{i}.{service['metadata']['name']}:{port}"
            for i in range(pods["spec"]["replicas"])]
    assert ",".join(args.pods).split(",") == want
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


def test_the_token_comes_from_the_secret_through_the_environment(objects):
    secret = _one(objects, "Secret")
    users = [c for kind in ("StatefulSet", "Job")
             for c in _one(objects, kind)["spec"]["template"]["spec"]["containers"]]
    for container in users:
        (token,) = [e for e in container["env"] if e["name"] == "PHOBOS_TOKEN"]
        ref = token["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]
        assert not any("token" in a for a in container.get("args", []))  # never argv


def test_every_volume_claim_exists_and_images_carry_the_projects_version(objects):
    claims = {name for kind, name in objects if kind == "PersistentVolumeClaim"}
    for kind in ("StatefulSet", "Job"):
        spec = _one(objects, kind)["spec"]["template"]["spec"]
        assert {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]} <= claims
        assert {c["image"] for c in spec["containers"]} == {f"phobos:{PYPROJECT['project']['version']}"}


def _dockerfile() -> list[tuple[str, str]]:
    text = repo_file("deploy/Dockerfile").read_text().replace("\\\n", " ")
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_dockerfile_builds_on_cuda_from_the_hashed_locks_and_runs_a_pod():
    steps = _dockerfile()
    assert steps[0][0] == "FROM" and steps[0][1].startswith("nvidia/cuda:")
    for op, rest in steps:
        if op == "COPY":
            for source in shlex.split(rest)[:-1]:
                assert repo_file(source).exists(), source
    runs = " ".join(rest for op, rest in steps if op == "RUN")
    assert "python3.11" in runs and "--require-hashes" in runs  # the locks pin CPython 3.11 wheels
    for lock in ("requirements.lock", "requirements-gpu.lock"):
        assert f"/opt/phobos/locks/{lock}" in runs
    entry = json.loads(dict(steps)["ENTRYPOINT"])
    assert entry[0] in PYPROJECT["project"]["scripts"]
    pod_parser().parse_args(json.loads(dict(steps)["CMD"]))
    lock_python = re.search(r"Python (\d+\.\d+)", repo_file("third_party/requirements.lock").read_text())
    assert lock_python.group(1) == "3.11"
