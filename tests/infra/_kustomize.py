"""``kubectl kustomize`` of the cached Kubernetes v1.20 build: what a kustomization renders to.

The mock tests answer Pulumi's ``kubernetes:kustomize:directory`` invoke with it, so the
objects they check are the ones the overlay really renders, not a copy of them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from layersched.core.errors import InputError
from layersched_harness.testbed.builds import kubernetes_build

REPO_ROOT = Path(__file__).resolve().parents[2]
#: A kustomization of a dozen objects renders in well under a second.
KUSTOMIZE_TIMEOUT_S = 60.0


def kubectl_path() -> Path:
    """The kubectl of the pinned Kubernetes build (``make kubernetes`` caches it)."""
    return kubernetes_build().binary("kubectl")


def skip_reason() -> str | None:
    """Why ``kubectl kustomize`` cannot run here, or None."""
    try:
        kubernetes_build().require("kubectl")
    except InputError as err:
        return str(err)
    return None


def kustomize(directory: Path | str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize DIRECTORY`` renders."""
    done = subprocess.run(
        [str(kubectl_path()), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=KUSTOMIZE_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {done.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
