"""The local testbed's playbooks parse (``ansible-playbook --syntax-check``).

The full bring-up/teardown runs in tests/integration/test_testbed_local.py (root only);
this check runs anywhere ansible-core is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from layersched.builds import CACHE_DIR_ENV, go_sources_sha256, module_sha256
from layersched_harness.testbed.builds import containerd_download, crio_build, kubernetes_build
from tests.fixtures import prereq

pytestmark = pytest.mark.infra

PLAYBOOKS = Path(__file__).resolve().parents[2] / "harness" / "playbooks"


def _ansible_playbook() -> str:
    beside = Path(sys.executable).with_name("ansible-playbook")
    found = str(beside) if beside.exists() else shutil.which("ansible-playbook")
    if found is None:
        prereq.missing("ansible-playbook not found (install the infra extras)")
    return found


@pytest.mark.parametrize(
    "playbook",
    [
        # Bring-up: roles packages, network, registry, node; then the inventory file.
        "testbed-local.yml",
        # Teardown: one role, no dependency on a finished bring-up.
        "testbed-local-down.yml",
        # The CRI relay in front of every node's runtime, and out again (testbed_relay role).
        "testbed-relay.yml",
        "testbed-relay-remove.yml",
        # containerd 2.x for the integration tests (containerd_download role).
        "containerd-download.yml",
    ],
    ids=["up", "down", "relay", "relay-remove", "containerd-download"],
)
def test_syntax_check(playbook: str) -> None:
    done = subprocess.run(
        [
            _ansible_playbook(),
            "--syntax-check",
            "-i",
            str(PLAYBOOKS / "inventory" / "local.yml"),
            str(PLAYBOOKS / playbook),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr


#: What harness/playbooks/vars/kubernetes.yml derives, as one JSON object.
KUBERNETES_VARS = (
    "{{ {'id': kubernetes_build_id, 'version': kubernetes_version, "
    "'minor': kubernetes_minor | int, "
    "'binaries': kubernetes_binaries, 'bin_dir': kubernetes_bin_dir, "
    "'cache_dir': kubernetes_cache_dir, 'module_sha256': kubernetes_build_sha256} | to_json }}"
)
#: What harness/playbooks/vars/containerd.yml derives.
CONTAINERD_VARS = (
    "{{ {'version': containerd_version, 'suite': containerd_suite, "
    "'codename': containerd_archive_codename, 'binaries': containerd_binaries, "
    "'cache_dir': containerd_cache_dir, 'tree_dir': containerd_tree_dir, "
    "'containerd': containerd_bin_dir ~ '/containerd'} | to_json }}"
)

#: What harness/playbooks/vars/crio.yml derives.
CRIO_VARS = "{{ {'version': crio_version, 'crio': crio_binary} | to_json }}"


def _playbook_vars(
    cache_dir: str | None,
    vars_file: str = "kubernetes.yml",
    expression: str = KUBERNETES_VARS,
    *extra: str,
) -> dict[str, object]:
    """What ``harness/playbooks/vars/<vars_file>`` evaluates to, as Ansible itself templates it."""
    env = {k: v for k, v in os.environ.items() if k != CACHE_DIR_ENV}
    if cache_dir is not None:
        env[CACHE_DIR_ENV] = cache_dir
    done = subprocess.run(
        [
            str(Path(_ansible_playbook()).with_name("ansible")),
            "localhost",
            "-c",
            "local",
            "--playbook-dir",
            str(PLAYBOOKS),
            "-e",
            f"@{PLAYBOOKS / 'vars' / vars_file}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            *extra,
            "-m",
            "ansible.builtin.debug",
            "-a",
            f"msg={expression}",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**env, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout[done.stdout.index("{") :])
    decoded: dict[str, object] = json.loads(answer["msg"])
    return decoded


def _kubernetes_paths() -> dict[str, object]:
    build = kubernetes_build()
    return {
        "id": build.build_id,
        "version": build.version,
        "minor": build.minor[1],
        "binaries": list(build.binaries),
        "bin_dir": str(build.bin_dir()),
        "cache_dir": str(build.cache_dir()),
        "module_sha256": build.module_sha256,
    }


def _containerd_paths() -> dict[str, object]:
    download = containerd_download()
    return {
        "version": download.version,
        "suite": download.suite,
        "codename": download.archive_codename,
        "binaries": list(download.binaries),
        "cache_dir": str(download.cache_dir()),
        "tree_dir": str(download.tree_dir()),
        "containerd": str(download.binary("containerd")),
    }


def _crio_paths() -> dict[str, object]:
    crio = crio_build()
    return {"version": crio.version, "crio": str(crio.binary())}


@pytest.mark.parametrize("cache_dir", [None, "/srv/other-cache"], ids=["default", "moved"])
@pytest.mark.parametrize(
    ("vars_file", "expression", "python_paths"),
    [
        # src/layersched/kubernetes-build.yml: every role, and the CLI defaults, tests
        # and benchmarks
        ("kubernetes.yml", KUBERNETES_VARS, _kubernetes_paths),
        # harness/layersched_harness/testbed/containerd-download.yml: make containerd, and
        # the integration tests' fixture
        ("containerd.yml", CONTAINERD_VARS, _containerd_paths),
        # harness/layersched_harness/testbed/crio-build.yml: make crio, the testbed's CRI-O
        # nodes, and the live CRI-O tests' fixture
        ("crio.yml", CRIO_VARS, _crio_paths),
    ],
    ids=["kubernetes", "containerd", "crio"],
)
def test_playbooks_derive_the_build_paths_as_the_cli_does(
    cache_dir: str | None,
    vars_file: str,
    expression: str,
    python_paths: Callable[[], dict[str, object]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one record, two derivations: Ansible's and layersched.builds' must agree
    if cache_dir is None:
        monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(CACHE_DIR_ENV, cache_dir)
    assert _playbook_vars(cache_dir, vars_file, expression) == python_paths()


def test_a_second_containerd_download_changes_nothing() -> None:
    # with the download cached (.ci/run's `make containerd`), the role only looks: no
    # network, changed=0 (ansible-lint's production profile asks the same of every role)
    download = containerd_download()
    prereq.require(
        None
        if not download.missing()
        else f"containerd {download.version} is not downloaded: run `make containerd`"
    )
    done = subprocess.run(
        [
            _ansible_playbook(),
            "-i",
            str(PLAYBOOKS / "inventory" / "local.yml"),
            str(PLAYBOOKS / "containerd-download.yml"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    recap = done.stdout[done.stdout.index("PLAY RECAP") :]
    assert "changed=0" in recap and "failed=0" in recap, recap


def test_playbooks_hash_any_module_as_the_cli_does(tmp_path: Path) -> None:
    # the awkward cases, on a module of its own: files deep down, tests and test data
    # (left out), names that sort differently by path and by parts, bytes past ASCII;
    # go.mod and go.sum go into the module's hash, besides the sources
    files = {
        "go.mod": "module x\n\nrequire k8s.io/kubernetes v1.37.2\n",
        "go.sum": "k8s.io/kubernetes v1.37.2 h1:x=\n",
        "a/b/c/d/e/deep.go": "package e\n",
        "a/b.go": "package a // é\n",
        "a-b/c.go": "package ab\n",
        "a/b_test.go": "package a\n",
        "a/testdata/t.go": "package t\n",
        "main.go": "package main\n\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    rendered = _playbook_vars(
        None,
        "kubernetes.yml",
        "{{ {'sources': kubernetes_module_sources_sha256, 'module': kubernetes_module_sha256,"
        " 'version': kubernetes_version} | to_json }}",
        "-e",
        f"kubernetes_module_dir={tmp_path}",
    )
    assert rendered == {
        "sources": go_sources_sha256(tmp_path),
        "module": module_sha256(tmp_path),
        "version": "v1.37.2",
    }
