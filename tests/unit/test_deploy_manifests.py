"""The Dockerfile and the Kubernetes manifests, validated offline: the Dockerfile with a maintained parser
(``dockerfile-parse``), the manifests with ``kubernetes-validate``'s strict schemas for the built-in kinds and
with the agent-sandbox CRDs' schema (deploy/kubernetes/schema) for the custom resources, whose embedded pods
are checked against the core PodSpec schema. The linter (``hadolint``) is tests/project/test_deploy.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from dockerfile_parse import DockerfileParser
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parent.parent.parent
KUBERNETES = ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.35"
PORT = 8765


# -- Dockerfile ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dockerfile() -> DockerfileParser:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    return parser


def instructions(parser: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in parser.structure if i["instruction"] == name]


def test_dockerfile_image_shape(dockerfile):
    assert dockerfile.baseimage.startswith("python:") and dockerfile.baseimage.endswith("-slim")
    user = instructions(dockerfile, "USER")
    assert user and user[-1].split(":")[0] not in ("root", "0"), "the daemon runs as an unprivileged user"
    volumes = " ".join(instructions(dockerfile, "VOLUME"))
    assert "/workspace" in volumes and "/state" in volumes
    health = instructions(dockerfile, "HEALTHCHECK")
    assert len(health) == 1 and f"127.0.0.1:{PORT}/healthz" in health[0]
    assert str(PORT) in " ".join(instructions(dockerfile, "EXPOSE"))
    entrypoint = json.loads(instructions(dockerfile, "ENTRYPOINT")[-1])
    command = json.loads(instructions(dockerfile, "CMD")[-1])
    assert entrypoint == ["peon", "serve"]
    assert "--host" in command and "--workspace" in command and "/workspace" in command
    assert "--token-file" not in command, "the token comes from the environment or an added --token-file"
    run = " ".join(instructions(dockerfile, "RUN"))
    assert '".[serve]"' in run, "the serve extra is installed"
    assert instructions(dockerfile, "STOPSIGNAL") == ["SIGTERM"]


def test_dockerfile_copies_only_what_the_package_needs(dockerfile):
    copied = {value.split()[0] for value in instructions(dockerfile, "COPY")}
    assert copied == {"pyproject.toml", "config", "peon", "supervisor", "workers"}
    packages = yaml.safe_load(json.dumps(_pyproject_packages()))
    assert {p.split(".")[0] for p in packages} == {"peon"}, "nothing Peon installs claims another top-level name"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignored and "tests" in ignored and "**/node_modules" in ignored


def _pyproject_packages() -> list[str]:
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["tool"]["setuptools"]["packages"]


# -- Kubernetes ------------------------------------------------------------------------------------------


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def core_definitions() -> dict[str, Any]:
    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    folders = [p for p in base.iterdir() if p.name.startswith(f"v{K8S_VERSION}.") and p.name.endswith("-local-strict")]
    folder = max(folders, key=lambda p: p.name)
    return json.loads((folder / "_definitions.json").read_text())


@pytest.fixture(scope="module")
def core() -> tuple[dict[str, Any], Registry]:
    definitions = core_definitions()
    return definitions, Registry().with_resource(definitions["$id"], Resource.from_contents(definitions))


def validate_core(value: Any, definition: str, core) -> None:
    definitions, registry = core
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$ref": f"{definitions['$id']}#/$defs/{definition}"}
    jsonschema.Draft202012Validator(schema, registry=registry).validate(value)


def closed(schema: Any) -> Any:
    """A CRD schema as a JSON Schema that also refuses unknown fields (a typo must fail the test, where
    the API server would silently prune it)."""
    if isinstance(schema, dict):
        out = {k: closed(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


@pytest.fixture(scope="module")
def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) → the version's openAPIV3Schema, from deploy/kubernetes/schema."""
    out = {}
    for crd in documents(KUBERNETES / "schema" / "agent-sandbox-v1beta1.yaml"):
        for version in crd["spec"]["versions"]:
            out[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = \
                version["schema"]["openAPIV3Schema"]
    return out


def test_the_crd_schema_is_a_valid_crd():
    for crd in documents(KUBERNETES / "schema" / "agent-sandbox-v1beta1.yaml"):
        kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"


def test_plain_deployment_and_service(core):
    docs = {doc["kind"]: doc for doc in documents(KUBERNETES / "peon.yaml")}
    assert set(docs) == {"Deployment", "Service"}
    for doc in docs.values():
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    check_peon_pod(pod, core)
    service = docs["Service"]["spec"]
    assert service["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["ports"][0]["port"] == PORT


def test_agent_sandbox_template_and_sandbox(crds, core):
    docs = {doc["kind"]: doc for doc in documents(KUBERNETES / "agent-sandbox.yaml")}
    assert set(docs) == {"SandboxTemplate", "Sandbox"}
    for doc in docs.values():
        schema = crds[(doc["apiVersion"], doc["kind"])]
        jsonschema.Draft202012Validator(closed(schema)).validate(doc)
        validate_core(doc["metadata"], "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", core)
        check_peon_pod(doc["spec"]["podTemplate"]["spec"], core)
    assert docs["SandboxTemplate"]["spec"]["podTemplate"] == docs["Sandbox"]["spec"]["podTemplate"], \
        "the template and the sandbox run the same pod"


@pytest.mark.parametrize("mutation, fragment", [
    (lambda d: d["spec"].update(shutdownPolicy="Later"), "is not one of"),
    (lambda d: d["spec"].update(operatingMode="Paused"), "is not one of"),
    (lambda d: d["spec"].pop("podTemplate"), "'podTemplate' is a required property"),
    (lambda d: d["spec"].update(podTemplates={}), "Additional properties"),
])
def test_the_sandbox_schema_catches_mistakes(crds, mutation, fragment):
    sandbox = next(doc for doc in documents(KUBERNETES / "agent-sandbox.yaml") if doc["kind"] == "Sandbox")
    mutation(sandbox)
    with pytest.raises(jsonschema.ValidationError, match=fragment):
        jsonschema.Draft202012Validator(closed(crds[(sandbox["apiVersion"], "Sandbox")])).validate(sandbox)


def test_the_core_pod_schema_catches_mistakes(core):
    pod = next(doc for doc in documents(KUBERNETES / "agent-sandbox.yaml")
               if doc["kind"] == "Sandbox")["spec"]["podTemplate"]["spec"]
    pod["containers"][0]["readinesProbe"] = pod["containers"][0].pop("readinessProbe")
    with pytest.raises(jsonschema.ValidationError):
        validate_core(pod, "io.k8s.api.core.v1.PodSpec", core)


def check_peon_pod(pod: dict[str, Any], core) -> None:
    """What every Peon pod must have: probes on the right endpoints, a token from a Secret, no root."""
    validate_core(pod, "io.k8s.api.core.v1.PodSpec", core)
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["ports"][0]["containerPort"] == PORT
    args = container["args"]
    assert f"--port={PORT}" in args and "--host=0.0.0.0" in args
    token_arg = next(a for a in args if a.startswith("--token-file="))
    token_dir = str(Path(token_arg.split("=", 1)[1]).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == token_dir)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert "secret" in volume and mount.get("readOnly") is True
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["terminationGracePeriodSeconds"] >= 15
    drain = next(float(a.split("=", 1)[1]) for a in args if a.startswith("--drain-seconds="))
    assert drain + 2 + 5 < pod["terminationGracePeriodSeconds"], "drain + TERM grace + exit fit in the grace period"
    mounted = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/workspace", "/state", "/tmp", "/home/peon"} <= mounted, "writable places on a read-only root"

