"""The KubeRay recipe (docs/kuberay/): parsed and checked for what the harness relies on;
nothing is deployed. A RayCluster whose Ray differs from the harness's, or that misses the
ports the harness joins by, would fail on the cluster, minutes into a deployment."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import ray
import yaml

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "kuberay"


def _manifest() -> dict[str, Any]:
    return yaml.safe_load((RECIPE / "raycluster.yaml").read_text())


def _containers(template: dict[str, Any]) -> list[dict[str, Any]]:
    return template["spec"]["containers"]


def test_the_manifest_is_a_raycluster_of_the_installed_rays_version():
    m = _manifest()
    assert m["apiVersion"] == "ray.io/v1" and m["kind"] == "RayCluster" and m["metadata"]["name"]
    major_minor = ".".join(ray.__version__.split(".")[:2])
    assert m["spec"]["rayVersion"].startswith(major_minor + ".")
    # the image every pod runs is built FROM that Ray (docs/kuberay/Dockerfile)
    base = re.search(r"^FROM rayproject/ray:(\S+)$", (RECIPE / "Dockerfile").read_text(), re.M)
    assert base and base.group(1).startswith(m["spec"]["rayVersion"] + "-py")


def test_the_head_and_workers_run_one_image_and_open_the_harnesss_ports():
    spec = _manifest()["spec"]
    head = spec["headGroupSpec"]
    workers = spec["workerGroupSpecs"]
    assert workers and all(w["groupName"] and w["replicas"] >= 1 for w in workers)
    assert all(w["minReplicas"] <= w["replicas"] <= w["maxReplicas"] for w in workers)
    images = {c["image"] for group in [head, *workers] for c in _containers(group["template"])}
    assert len(images) == 1  # the same harness and Ray on every node
    assert f"ray{spec['rayVersion']}" in next(iter(images))
    ports = {p["name"]: p["containerPort"] for p in _containers(head["template"])[0]["ports"]}
    assert ports["gcs-server"] == 6379  # distribute.address=auto, from the head pod
    assert ports["client"] == 10001  # ray://head:10001
    # KubeRay passes rayStartParams to `ray start` as strings; a number there is rejected
    for group in [head, *workers]:
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())
    assert head["rayStartParams"]["num-cpus"] == "0"  # replicas and shards land on the workers
    mounts = {v["mountPath"] for v in _containers(head["template"])[0]["volumeMounts"]}
    assert "/results" in mounts


def test_the_docs_give_the_run_line_for_it():
    text = (ROOT / "docs" / "distribute.md").read_text()
    assert "docs/kuberay/raycluster.yaml" in text
    run = next(line for line in text.splitlines() if "harness run" in line and "distribute.address=auto" in line)
    assert "--output-dir /results" in run
