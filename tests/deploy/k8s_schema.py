"""A small structural schema of the Kubernetes kinds deploy/k8s uses, for checking the manifests
without a cluster or a downloaded tool: every field's name and type against the API's (core/v1,
apps/v1, batch/v1, the fields these objects can hold), and the fields the API server requires.

A schema is a dict of field name -> type; a type is str, int, bool, a nested schema, [type] (a
list), or MAP (a string-to-string map). A field missing from a schema is an error: a typo
(`contianers`) fails here as the API server's strict field validation would reject it."""

from __future__ import annotations

MAP = "map"  # string keys and values: labels, annotations, matchLabels, stringData
QUANTITIES = "quantities"  # string keys, quantities as values: resources' limits and requests
ANY_QUANTITY = (str, int)  # "10Gi", 1; also an int-or-string port

METADATA = {"name": str, "namespace": str, "labels": MAP, "annotations": MAP}
SECRET_KEY = {"name": str, "key": str, "optional": bool}
ENV_VAR = {"name": str, "value": str, "valueFrom": {"secretKeyRef": SECRET_KEY,
                                                    "fieldRef": {"fieldPath": str, "apiVersion": str}}}
PORT = {"name": str, "containerPort": int, "protocol": str}
PROBE = {"tcpSocket": {"port": ANY_QUANTITY}, "exec": {"command": [str]}, "periodSeconds": int,
         "initialDelaySeconds": int, "timeoutSeconds": int, "failureThreshold": int}
CONTAINER = {"name": str, "image": str, "imagePullPolicy": str, "command": [str], "args": [str],
             "workingDir": str, "ports": [PORT], "env": [ENV_VAR], "readinessProbe": PROBE,
             "livenessProbe": PROBE, "resources": {"limits": QUANTITIES, "requests": QUANTITIES},
             "volumeMounts": [{"name": str, "mountPath": str, "readOnly": bool, "subPath": str}]}
VOLUME = {"name": str, "persistentVolumeClaim": {"claimName": str, "readOnly": bool},
          "secret": {"secretName": str}, "emptyDir": {"medium": str}}
POD_SPEC = {"containers": [CONTAINER], "initContainers": [CONTAINER], "volumes": [VOLUME],
            "restartPolicy": str, "nodeSelector": MAP, "serviceAccountName": str,
            "terminationGracePeriodSeconds": int}
POD_TEMPLATE = {"metadata": METADATA, "spec": POD_SPEC}

KINDS = {
    ("v1", "Secret"): {"metadata": METADATA, "type": str, "data": MAP, "stringData": MAP},
    ("v1", "PersistentVolumeClaim"): {"metadata": METADATA, "spec": {
        "accessModes": [str], "storageClassName": str,
        "resources": {"requests": QUANTITIES, "limits": QUANTITIES}}},
    ("v1", "Service"): {"metadata": METADATA, "spec": {
        "clusterIP": str, "selector": MAP, "publishNotReadyAddresses": bool, "type": str,
        "ports": [{"name": str, "port": int, "targetPort": ANY_QUANTITY, "protocol": str}]}},
    ("apps/v1", "StatefulSet"): {"metadata": METADATA, "spec": {
        "serviceName": str, "replicas": int, "podManagementPolicy": str,
        "selector": {"matchLabels": MAP}, "template": POD_TEMPLATE}},
    ("batch/v1", "Job"): {"metadata": METADATA, "spec": {
        "backoffLimit": int, "activeDeadlineSeconds": int, "ttlSecondsAfterFinished": int,
        "completions": int, "parallelism": int, "template": POD_TEMPLATE}},
}

# Required by the API server (or by these kinds' validation), as dotted paths.
REQUIRED = {
    ("v1", "Secret"): ["metadata.name"],
    ("v1", "PersistentVolumeClaim"): ["metadata.name", "spec.accessModes", "spec.resources.requests"],
    ("v1", "Service"): ["metadata.name", "spec.ports"],
    ("apps/v1", "StatefulSet"): ["metadata.name", "spec.selector", "spec.template.spec.containers",
                                 "spec.serviceName"],
    ("batch/v1", "Job"): ["metadata.name", "spec.template.spec.containers",
                          "spec.template.spec.restartPolicy"],
}
NAMED_LISTS = ("containers", "ports", "env", "volumes", "volumeMounts", "initContainers")


def problems(doc: dict, where: str) -> list[str]:
    """Every schema violation of one manifest document, as 'where: path: problem' lines."""
    if not isinstance(doc, dict):
        return [f"{where}: a manifest must be a mapping"]
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in KINDS:
        return [f"{where}: unknown apiVersion/kind {key[0]}/{key[1]} (known: "
                f"{', '.join(f'{a}/{k}' for a, k in KINDS)})"]
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    out = _check(body, KINDS[key], f"{where}: {key[1]}")
    for path in REQUIRED[key]:
        if _get(doc, path) in (None, [], {}):
            out.append(f"{where}: {key[1]}: {path} is required")
    return out


def _get(doc, path: str):
    for part in path.split("."):
        if not isinstance(doc, dict):
            return None
        doc = doc.get(part)
    return doc


def _check(value, schema, path: str) -> list[str]:
    if schema == MAP:
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in value.items()):
            return [f"{path}: expected a map of strings to strings"]
        return []
    if schema == QUANTITIES:
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str | int) and not isinstance(v, bool)
                for k, v in value.items()):
            return [f"{path}: expected a map of names to quantities (\"10Gi\", 1)"]
        return []
    if isinstance(schema, tuple | type):
        ok = isinstance(value, schema) and not (isinstance(value, bool) and schema is not bool)
        return [] if ok else [f"{path}: expected {_name(schema)}, got {type(value).__name__}"]
    if isinstance(schema, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        out = [line for i, item in enumerate(value) for line in _check(item, schema[0], f"{path}[{i}]")]
        names = [item.get("name") for item in value if isinstance(item, dict) and "name" in item]
        if path.rsplit(".", 1)[-1] in NAMED_LISTS and len(names) != len(set(names)):
            out.append(f"{path}: names repeat: {names}")
        return out
    if not isinstance(value, dict):
        return [f"{path}: expected a mapping"]
    out = []
    for field, item in value.items():
        if field not in schema:
            out.append(f"{path}.{field}: unknown field (known: {', '.join(sorted(schema))})")
        else:
            out.extend(_check(item, schema[field], f"{path}.{field}"))
    return out


def _name(schema) -> str:
    return " or ".join(t.__name__ for t in schema) if isinstance(schema, tuple) else schema.__name__
