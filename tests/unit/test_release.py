"""The release workflow names what the rest of the project names: the images the chart
pulls, the builder that makes them, one helm, one Go."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from layersched.deploy import CHART_DIR, PUBLISHED_IMAGE, PUBLISHED_KUBE_SCHEDULER
from layersched_harness.testbed.builds import FALLBACK_GO, go_tool
from tests.fixtures import prereq

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def test_the_workflow_publishes_the_images_the_chart_pulls() -> None:
    env = _workflow()["env"]
    assert isinstance(env, dict)
    assert env["IMAGE"] == PUBLISHED_IMAGE
    assert env["KUBE_SCHEDULER_IMAGE"] == PUBLISHED_KUBE_SCHEDULER
    assert env["HELM_VERSION"] == go_tool("helm").version


def test_it_builds_with_the_go_the_binaries_were_tested_with() -> None:
    # the kube-scheduler binaries' toolchain is part of their digests: the release's is
    # this project's machines' (where the images and the plugin are built and tested)
    env = _workflow()["env"]
    assert isinstance(env, dict)
    try:
        version = (FALLBACK_GO.parent.parent / "VERSION").read_text().split()[0]
    except OSError as err:
        prereq.missing(f"the project's Go toolchain at {FALLBACK_GO}: {err}")
    assert f"go{env['GO_VERSION']}" == version


def test_it_runs_on_tags_and_publishes_wheel_images_and_chart() -> None:
    workflow = _workflow()
    # PyYAML reads the key `on` as True
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # type: ignore[index]
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict) and set(jobs) == {"wheel", "images", "chart"}
    text = WORKFLOW.read_text()
    # the images: the Docker-free builder's, pushed as built, digests checked
    assert "python harness/scripts/images.py --out dist/images --record dist/images.json" in text
    assert "skopeo copy --all --preserve-digests" in text
    assert "docker/build-push-action" not in text
    # the chart and install/kustomize/ pinned to those digests
    assert "layersched deploy chart --images dist/images.json" in text
    assert "layersched deploy render --images dist/images.json" in text
    assert f"helm lint --strict {CHART_DIR}" in text


def test_every_checkout_path_the_workflow_names_exists() -> None:
    # a moved folder (deploy/ became install/kustomize/) must not leave the release
    # archiving or linting a path that is gone: each tracked path it names, and the
    # archived kustomize install (`tar ... -C DIR NAME`), exists
    text = WORKFLOW.read_text()
    named = set(re.findall(r"(?<![\w./-])((?:src|install|harness)/[\w./-]*[\w/])", text))
    assert named, "the workflow names no checkout path"
    assert [p for p in sorted(named) if not (REPO_ROOT / p).exists()] == []
    gone = r"(?<![\w./-])(?:plugin|bench|scripts|playbooks|infra|charts|deploy|images|reports)/"
    assert re.findall(gone + r"\S*", text) == [], "a path of the layout before issue 47"
    [(parent, name)] = re.findall(r"tar -czf \S+ -C (\S+) (\S+)", text)
    assert (REPO_ROOT / parent / name / "kustomization.yaml").is_file()
