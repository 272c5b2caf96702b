"""``kubectl kustomize`` of the cached Kubernetes v1.20 build: what a kustomization renders to.

The mock tests answer Pulumi's ``kubernetes:kustomize:directory`` invoke with it, so the
objects they check are the ones the overlay really renders, not a copy of them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
#: A kustomization of a dozen objects renders in well under a second.
KUSTOMIZE_TIMEOUT_S = 60.0


def kubectl_path() -> Path:
    """The kubectl of the pinned Kubernetes build (``make kubernetes`` caches it)."""
    pinned = yaml.safe_load((REPO_ROOT / "playbooks" / "vars" / "kubernetes.yml").read_text())
    cache_root = Path(os.environ.get("LAYERSCHED_CACHE_DIR", "/var/cache/layersched"))
    build_id = f"{pinned['kubernetes_source_version']}+{pinned['kubernetes_build_revision']}"
    return cache_root / "kubernetes" / build_id / "bin" / "kubectl"


def skip_reason() -> str | None:
    """Why ``kubectl kustomize`` cannot run here, or None."""
    kubectl = kubectl_path()
    if not kubectl.exists():
        return f"{kubectl} missing: build the Kubernetes binaries (make kubernetes)"
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
