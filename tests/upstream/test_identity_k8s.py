"""deploy/k8s/overlays/cloud-identity renders (as tests/deploy renders the example overlay):
the federated ServiceAccount with each cloud's annotation, and the gateway's pods running as
it with AKS's workload identity label."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.kustomize import render

OVERLAY = Path(__file__).resolve().parents[2] / "deploy/k8s/overlays/cloud-identity"


def test_the_pods_run_as_the_federated_service_account() -> None:
    objects = render(OVERLAY)
    [account] = [o for o in objects if o["kind"] == "ServiceAccount"]
    assert account["metadata"]["name"] == "gateway"
    assert account["metadata"]["namespace"] == "llm-gateway"
    annotations = account["metadata"]["annotations"]
    assert {
        "eks.amazonaws.com/role-arn",
        "iam.gke.io/gcp-service-account",
        "azure.workload.identity/client-id",
    } <= set(annotations)
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == "gateway"
    assert pod["metadata"]["labels"]["azure.workload.identity/use"] == "true"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "gateway"  # merged, not replaced
    assert pod["spec"]["containers"][0]["name"] == "gateway"
