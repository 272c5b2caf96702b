"""The release workflow names what the rest of the project names: one image, one helm."""

from __future__ import annotations

from pathlib import Path

import yaml

from layersched.builds import go_tool
from layersched.deploy import CHART_DIR, PUBLISHED_IMAGE

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "release.yml"


def _workflow() -> dict[str, object]:
    loaded: dict[str, object] = yaml.safe_load(WORKFLOW.read_text())
    return loaded


def test_the_workflow_publishes_the_image_the_chart_pulls() -> None:
    env = _workflow()["env"]
    assert isinstance(env, dict)
    assert env["IMAGE"] == PUBLISHED_IMAGE
    assert env["HELM_VERSION"] == go_tool("helm").version


def test_it_runs_on_tags_and_publishes_wheel_image_and_chart() -> None:
    workflow = _workflow()
    # PyYAML reads the key `on` as True
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # type: ignore[index]
    jobs = workflow["jobs"]
    assert isinstance(jobs, dict) and set(jobs) == {"wheel", "image", "chart"}
    text = WORKFLOW.read_text()
    assert "images/layersched/Containerfile" in text
    assert "linux/amd64,linux/arm64" in text
    assert f"helm lint --strict {CHART_DIR}" in text
