"""``make testbed DRIVER=cloud`` really run, its preconditions against this machine's state.

Each missing precondition (the pulumi CLI, AWS credentials, the stack, a config key, the
SSH key) stops the run with exit 1 and ONE line naming what to set, before ``pulumi up``
or anything else that creates resources is called. A stand-in ``pulumi`` logs its calls
and answers ``config get`` from ``$FAKE_CONFIG``; when ``pulumi up`` fails, the run says
how to tear down. No real pulumi CLI or AWS account is used: none is here.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.infra

REPO = Path(__file__).resolve().parents[2]
SCRIPT_TIMEOUT_S = 30
FULL_CONFIG = "region=eu-west-1 operatorCidr=203.0.113.7/32 sshPublicKey=ssh-ed25519_AAAA"

#: pulumi: `stack select` fails unless $FAKE_STACK=1; `config get KEY` answers KEY's value
#: from $FAKE_CONFIG ("k=v k=v"), exit 1 for a missing key as the real CLI does; `up`
#: exits $FAKE_UP_EXIT; every call is logged.
FAKE_PULUMI = """\
#!/bin/sh
echo "pulumi $*" >> "$FAKE_LOG"
case "$*" in
  *"stack select"*) [ "${FAKE_STACK:-0}" = 1 ] || exit 255 ;;
  *"config get"*)
    key=$(echo "$*" | sed 's/.*config get \\([A-Za-z]*\\).*/\\1/')
    for pair in ${FAKE_CONFIG:-}; do
      [ "${pair%%=*}" = "$key" ] && { echo "${pair#*=}"; exit 0; }
    done
    echo "error: configuration key '$key' not found" >&2; exit 1 ;;
  *" up "*) exit "${FAKE_UP_EXIT:-0}" ;;
esac
exit 0
"""
FAKE_LOGGER = '#!/bin/sh\necho "$(basename "$0") $*" >> "$FAKE_LOG"\n'


def _run(
    tmp_path: Path, env: dict[str, str], *, action: str = "up", pulumi: bool = True
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir, venv_bin = tmp_path / "bin", tmp_path / "venv" / "bin"
    bin_dir.mkdir(exist_ok=True)
    venv_bin.mkdir(parents=True, exist_ok=True)
    fakes = [(venv_bin / "ansible-playbook", FAKE_LOGGER), (venv_bin / "python", FAKE_LOGGER)]
    if pulumi:
        fakes.append((bin_dir / "pulumi", FAKE_PULUMI))
    for path, text in fakes:
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    key = tmp_path / "id_ed25519"
    key.write_text("private\n")
    done = subprocess.run(
        ["bash", str(REPO / "harness" / "scripts" / "testbed.sh"), action],
        capture_output=True,
        text=True,
        timeout=SCRIPT_TIMEOUT_S,
        cwd=REPO,
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "VENV": str(tmp_path / "venv"),
            "DRIVER": "cloud",
            "FAKE_LOG": str(log),
            "LAYERSCHED_CLOUD_SSH_KEY": str(key),
            "LAYERSCHED_CLOUD_STATE_DIR": str(tmp_path / "state"),
        }
        | env,
    )
    return done, log.read_text().splitlines()


CREDENTIALS = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret"}


@pytest.mark.parametrize(
    ("pulumi", "env", "names"),
    [
        # No CLI at all: nothing else is looked at.
        (False, CREDENTIALS, "the pulumi CLI is not on PATH"),
        # No credentials in the environment and no ~/.aws/credentials (HOME is empty).
        (True, {}, "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        # A key id without its secret is no credential either.
        (True, {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE"}, "no AWS credentials"),
        # Credentials, but no stack yet.
        (
            True,
            CREDENTIALS,
            "no Pulumi stack dev: run pulumi --cwd harness/infra/cloud stack init dev",
        ),
        # A stack missing two keys: both named, with the command that sets them.
        (
            True,
            CREDENTIALS | {"FAKE_STACK": "1", "FAKE_CONFIG": "region=eu-west-1"},
            "stack dev lacks operatorCidr sshPublicKey: set each with pulumi --cwd "
            "harness/infra/cloud "
            "config set KEY VALUE",
        ),
        # Everything set but the private key Ansible logs in with.
        (
            True,
            CREDENTIALS | {"FAKE_STACK": "1", "FAKE_CONFIG": FULL_CONFIG,
                           "LAYERSCHED_CLOUD_SSH_KEY": "/nonexistent/key"},
            "no SSH private key at /nonexistent/key: set LAYERSCHED_CLOUD_SSH_KEY",
        ),
    ],
    ids=["no-cli", "no-credentials", "half-credentials", "no-stack", "missing-keys", "no-ssh-key"],
)  # fmt: skip
def test_missing_precondition_stops_before_anything_is_created(
    tmp_path: Path, pulumi: bool, env: dict[str, str], names: str
) -> None:
    done, calls = _run(tmp_path, env, pulumi=pulumi)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("DRIVER=cloud: ") and names in line
    # Nothing that creates anything ran: no `pulumi up`, no Ansible, no stack init.
    assert not [c for c in calls if " up " in f"{c} " or "stack init" in c]
    assert not [c for c in calls if c.startswith(("ansible-playbook", "python"))]


def test_profile_file_counts_as_credentials(tmp_path: Path) -> None:
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIA\n")
    done, _ = _run(tmp_path, {}, action="check")
    # Past the credentials check: the next missing thing is the stack.
    assert "no Pulumi stack dev" in done.stderr


def test_failed_up_prints_the_teardown_command(tmp_path: Path) -> None:
    env = CREDENTIALS | {"FAKE_STACK": "1", "FAKE_CONFIG": FULL_CONFIG, "FAKE_UP_EXIT": "1",
                         "LAYERSCHED_SKIP_KUBERNETES_BUILD": "1"}  # fmt: skip
    done, calls = _run(tmp_path, env)
    assert done.returncode != 0
    assert any(c.startswith("pulumi --cwd harness/infra/cloud up --stack dev --yes") for c in calls)
    assert (
        "tear down with make testbed-down DRIVER=cloud LAYERSCHED_CLOUD_STACK=dev"
        in (done.stderr.splitlines()[-1])
    )


def test_down_destroys_the_stack(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, CREDENTIALS | {"FAKE_STACK": "1"}, action="down")
    assert done.returncode == 0, done.stderr
    assert "pulumi --cwd harness/infra/cloud destroy --stack dev --yes" in calls


def test_down_without_a_stack_is_a_no_op(tmp_path: Path) -> None:
    done, calls = _run(tmp_path, CREDENTIALS, action="down")
    assert done.returncode == 0
    assert "nothing to tear down" in done.stderr
    assert not [c for c in calls if "destroy" in c]
