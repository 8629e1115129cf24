"""Renders a kustomization the way `kustomize build` does, for the subset deploy/k8s uses.

No kustomize binary can be installed on a fresh machine from the registries this project
uses (Debian's kubernetes-client bundles a kustomize from 2019 that knows neither `patches`
nor generators as written here), so the manifest tests render with this. What it does not
know it refuses, naming the field: a kustomization that grows a feature fails here loudly
instead of being half rendered. test_manifests.py compares its output with
`kubectl kustomize` wherever kubectl is on PATH.

Supported: resources (files and directories), namespace, images, patches (strategic merge,
by kind and name), configMapGenerator and secretGenerator (files, envs, literals) with
kustomize's content-hash name suffix, and the name references from pod specs to generated
ConfigMaps and Secrets.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

KNOWN_FIELDS = {
    "apiVersion",
    "kind",
    "resources",
    "namespace",
    "images",
    "patches",
    "configMapGenerator",
    "secretGenerator",
}
GENERATOR_FIELDS = {"name", "files", "envs", "literals", "type", "options"}
IMAGE_FIELDS = {"name", "newName", "newTag", "digest"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
    "IngressClass",
}
# Strategic merge keys of the list fields these manifests patch (from the Kubernetes API's
# patchMergeKey tags); any other list is replaced whole, as kustomize does.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
}


class UnsupportedKustomization(Exception):
    pass


def render(directory: Path) -> list[Obj]:
    objects, _ = _render(directory)
    return objects


def _render(directory: Path) -> tuple[list[Obj], dict[tuple[str, str], str]]:
    """The objects of one kustomization, and the generated names (kind, name) -> name-hash."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN_FIELDS
    if unknown:
        raise UnsupportedKustomization(f"{directory}: unsupported fields {sorted(unknown)}")
    objects: list[Obj] = []
    generated: dict[tuple[str, str], str] = {}
    for entry in spec.get("resources", []):
        path = directory / entry
        if path.is_dir():
            sub_objects, sub_generated = _render(path)
            objects += sub_objects
            generated.update(sub_generated)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for gen in spec.get("configMapGenerator", []):
        objects.append(_generate("ConfigMap", gen, directory, generated))
    for gen in spec.get("secretGenerator", []):
        objects.append(_generate("Secret", gen, directory, generated))
    for patch in spec.get("patches", []):
        _apply_patch(objects, patch, directory)
    if "namespace" in spec:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = spec["namespace"]
    for image in spec.get("images", []):
        _set_image(objects, image)
    _rename_references(objects, generated)
    return objects, generated


def _generate(kind: str, gen: Obj, directory: Path, generated: dict[tuple[str, str], str]) -> Obj:
    unknown = set(gen) - GENERATOR_FIELDS
    if unknown:
        raise UnsupportedKustomization(f"{kind} generator: unsupported fields {sorted(unknown)}")
    data: dict[str, str] = {}
    for item in gen.get("files", []):
        key, _, name = item.rpartition("=") if "=" in item else ("", "", item)
        data[key or Path(name).name] = (directory / name).read_text()
    for env_file in gen.get("envs", []):
        data.update(read_env_file(directory / env_file))
    for literal in gen.get("literals", []):
        key, _, value = literal.partition("=")
        data[key] = value
    name = gen["name"]
    obj: Obj = {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}}
    if kind == "Secret":
        obj["type"] = gen.get("type", "Opaque")
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    else:
        obj["data"] = data
    options = gen.get("options", {})
    if set(options) - {"disableNameSuffixHash"}:
        raise UnsupportedKustomization(f"{kind} generator: unsupported options {sorted(options)}")
    # disableNameSuffixHash: a stable name, so an edit updates the object in place
    hashed = name if options.get("disableNameSuffixHash") else f"{name}-{content_hash(obj)}"
    obj["metadata"]["name"] = hashed
    generated[(kind, name)] = hashed
    return obj


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and lines starting with # are skipped, as kustomize does."""
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep:
            raise UnsupportedKustomization(f"{path}:{number}: not KEY=VALUE")
        values[key] = value
    return values


def content_hash(obj: Obj) -> str:
    """kustomize's name suffix: sha256 over Go's JSON of the object's kind, data and (for a
    Secret) type, the first 10 hex digits with vowel-like digits swapped so the suffix can
    never spell a word. The name is hashed as "": kustomize 5 looks it up under a path that
    never matches (`kubectl create --append-hash` hashes the real name, so its suffixes
    differ)."""
    fields: Obj = {"kind": obj["kind"], "name": "", "data": obj["data"]}
    if obj["kind"] == "Secret":
        fields["type"] = obj["type"]
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    # Go's encoder escapes these for embedding in HTML; Python's does not.
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return digest.translate(str.maketrans("013ae", "ghkmt"))


def _apply_patch(objects: list[Obj], patch: Obj, directory: Path) -> None:
    if set(patch) != {"path"}:
        raise UnsupportedKustomization(f"patch {patch}: only `path` patches are supported")
    body = yaml.safe_load((directory / patch["path"]).read_text())
    kind, name = body["kind"], body["metadata"]["name"]
    targets = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if len(targets) != 1:
        raise UnsupportedKustomization(f"patch {patch['path']}: no single {kind} {name}")
    merged = strategic_merge(targets[0], body)
    targets[0].clear()
    targets[0].update(merged)


def strategic_merge(base: Any, patch: Any, field: str = "") -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif key in out:
                out[key] = strategic_merge(out[key], value, key)
            else:
                out[key] = copy.deepcopy(value)
        return out
    merge_key = MERGE_KEYS.get(field)
    if isinstance(base, list) and isinstance(patch, list) and merge_key:
        out_list = copy.deepcopy(base)
        for item in patch:
            match = [i for i, b in enumerate(out_list) if b.get(merge_key) == item[merge_key]]
            if match:
                out_list[match[0]] = strategic_merge(out_list[match[0]], item)
            else:
                out_list.append(copy.deepcopy(item))
        return out_list
    return copy.deepcopy(patch)


def pod_spec(obj: Obj) -> Obj | None:
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        spec: Obj = obj["spec"]["template"]["spec"]
        return spec
    return None


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """name, tag, digest of an image reference (a registry port is not a tag)."""
    rest, _, digest = image.partition("@")
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        return rest[:colon], rest[colon + 1 :], digest or None
    return rest, None, digest or None


def _set_image(objects: list[Obj], rule: Obj) -> None:
    unknown = set(rule) - IMAGE_FIELDS
    if unknown:
        raise UnsupportedKustomization(f"images: unsupported fields {sorted(unknown)}")
    for obj in objects:
        spec = pod_spec(obj)
        for container in [] if spec is None else spec.get("containers", []):
            name, tag, digest = split_image(container["image"])
            if name != rule["name"]:
                continue
            name = rule.get("newName", name)
            if "newTag" in rule:
                tag = rule["newTag"]
            if "digest" in rule:
                tag, digest = None, rule["digest"]
            ref = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
            container["image"] = ref


def _rename_references(objects: list[Obj], generated: dict[tuple[str, str], str]) -> None:
    def rename(holder: Obj | None, field: str, kind: str) -> None:
        if holder is not None and (kind, holder.get(field)) in generated:
            holder[field] = generated[(kind, holder[field])]

    for obj in objects:
        spec = pod_spec(obj)
        if spec is None:
            continue
        for volume in spec.get("volumes", []):
            rename(volume.get("configMap"), "name", "ConfigMap")
            rename(volume.get("secret"), "secretName", "Secret")
        for container in spec.get("containers", []) + spec.get("initContainers", []):
            for source in container.get("envFrom", []):
                rename(source.get("configMapRef"), "name", "ConfigMap")
                rename(source.get("secretRef"), "name", "Secret")
            for var in container.get("env", []):
                ref = var.get("valueFrom", {})
                rename(ref.get("configMapKeyRef"), "name", "ConfigMap")
                rename(ref.get("secretKeyRef"), "name", "Secret")
