"""Private registries: credentials from a dockerconfigjson file and from credential helpers.

The registries are real (``docker-registry`` with htpasswd, and with token auth
behind the in-test token service); the helpers are small shell scripts written
by the tests, first on ``PATH``, run as Docker runs them
(``docker-credential-NAME get``, the registry on stdin, JSON on stdout).
"""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from layersched.cli._sources import open_layer_source
from layersched.cli.main import build_parser
from layersched.core.errors import RegistryError
from layersched.images.oci import push_image
from layersched.registry import RegistryClient, RegistryLayerSource
from layersched.registry._config import IDENTITY_TOKEN_USER, CredentialHelperError, run_helper
from tests.fixtures.registry import RegistryProcess
from tests.integration.test_registry import AMD, pusher

pytestmark = pytest.mark.integration

# The helper appends "get <server on stdin>" to calls.log next to itself, then answers.
HELPER = """#!/bin/sh
read -r server
echo "$1 $server" >> "$(dirname "$0")/calls.log"
printf '{{"ServerURL": "%s", "Username": "{user}", "Secret": "{secret}"}}' "$server"
"""
# what docker-credential-pass and -secretservice print when they hold nothing
HELPER_NOT_FOUND = """#!/bin/sh
echo "credentials not found in native keychain"
exit 1
"""
HELPER_BROKEN = """#!/bin/sh
echo "dbus: no session" >&2
exit 3
"""
HELPER_GARBAGE = """#!/bin/sh
echo "hello"
"""
# forks a child that keeps stdout open: subprocess.run(timeout=) alone would wait for it
HELPER_HANGS = """#!/bin/sh
sleep 30 &
sleep 30
"""
HELPER_TIMEOUT_S = 0.5


class Helpers:
    """A directory first on PATH where tests write docker-credential-NAME scripts."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir

    def add(self, name: str, text: str) -> None:
        script = self.bin_dir / f"docker-credential-{name}"
        script.write_text(text)
        script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def answering(self, name: str, user: str, secret: str) -> None:
        self.add(name, HELPER.format(user=user, secret=secret))

    def calls(self) -> list[str]:
        log = self.bin_dir / "calls.log"
        return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Helpers:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return Helpers(bin_dir)


def write_config(tmp_path: Path, doc: dict[str, object]) -> Path:
    """A file as a kubernetes.io/dockerconfigjson Secret mounts it (key .dockerconfigjson)."""
    path = tmp_path / "secret" / ".dockerconfigjson"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def private(auth_registry: RegistryProcess) -> RegistryProcess:
    """The htpasswd registry with app:1 pushed."""
    with pusher(auth_registry) as c:
        push_image(c, f"{auth_registry.host}/app:1", AMD)
    return auth_registry


# -- helpers as processes ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "outcome"),
    [
        # Username/Secret out
        (HELPER.format(user="user", secret="pw"), ("user", "pw")),
        # "<token>" means Secret is an identity token
        (HELPER.format(user="<token>", secret="refresh"), (IDENTITY_TOKEN_USER, "refresh")),
        # "credentials not found" (exit 1): no credentials, not an error
        (HELPER_NOT_FOUND, None),
        # anything else failing: an error quoting its stderr
        (HELPER_BROKEN, "exit status 3 (dbus: no session)"),
        (HELPER_GARBAGE, "expected {\"Username\": …, \"Secret\": …} on stdout, got 'hello"),
        # a hung helper, and the child holding its stdout, are killed at the timeout
        (HELPER_HANGS, f"no answer within {HELPER_TIMEOUT_S} s"),
        # not installed
        (None, "docker-credential-x not found on PATH – install it"),
    ],
    ids=["ok", "identity-token", "not-found", "fails", "garbage", "hangs", "absent"],
)  # fmt: skip
def test_run_helper(
    helpers: Helpers, script: str | None, outcome: tuple[str, str] | str | None
) -> None:
    if script is not None:
        helpers.add("x", script)
    if isinstance(outcome, str):
        with pytest.raises(CredentialHelperError) as info:
            run_helper("x", "reg.lan:5000", timeout_s=HELPER_TIMEOUT_S)
        assert outcome in str(info.value)
        assert "asking credential helper docker-credential-x for reg.lan:5000" in str(info.value)
    else:
        assert run_helper("x", "reg.lan:5000", timeout_s=HELPER_TIMEOUT_S) == outcome


# -- htpasswd ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry",
    [
        # docker login's form: base64(user:password)
        "auth",
        # the explicit form
        "username-password",
    ],
)
def test_dockerconfigjson_against_htpasswd(
    private: RegistryProcess, tmp_path: Path, entry: str
) -> None:
    user, password = private.username or "", private.password or ""
    fields = (
        {"auth": _b64(f"{user}:{password}")}
        if entry == "auth"
        else {"username": user, "password": password}
    )
    config = write_config(tmp_path, {"auths": {private.host: fields}})
    with RegistryClient(auth_files=[config]) as client:
        assert client.resolve(f"{private.host}/app:1").layers == AMD.layers


def test_cli_registry_config_against_htpasswd(private: RegistryProcess, tmp_path: Path) -> None:
    # layersched extender --registry-config PATH: the flag reaches the client.
    user, password = private.username or "", private.password or ""
    config = write_config(tmp_path, {"auths": {private.host: {"auth": _b64(f"{user}:{password}")}}})
    args = build_parser().parse_args(["extender", "--port", "1", "--registry-config", str(config)])
    source = open_layer_source(args)
    assert isinstance(source, RegistryLayerSource)
    with source.client:
        assert source.resolve(f"{private.host}/app:1") == AMD.layers


def test_creds_store_with_wrong_secret_says_rejected(
    private: RegistryProcess, helpers: Helpers, tmp_path: Path
) -> None:
    helpers.answering("store", private.username or "", "wrong")
    config = write_config(tmp_path, {"credsStore": "store"})
    with RegistryClient(auth_files=[config]) as c, pytest.raises(RegistryError) as info:
        c.resolve(f"{private.host}/app:1")
    assert f"the credentials for {private.host} were rejected" in str(info.value)


def test_broken_helper_is_a_clear_error(
    private: RegistryProcess, helpers: Helpers, tmp_path: Path
) -> None:
    helpers.add("broken", HELPER_BROKEN)
    config = write_config(tmp_path, {"credsStore": "broken"})
    with RegistryClient(auth_files=[config], retries=0) as c, pytest.raises(RegistryError) as e:
        c.resolve(f"{private.host}/app:1")
    assert str(e.value) == (
        f"resolving manifest for '{private.host}/app:1' at {private.host}: asking credential "
        f"helper docker-credential-broken for {private.host}: exit status 3 (dbus: no session)"
    )


# -- token auth --------------------------------------------------------------------------


@pytest.fixture
def private_token(token_registry: RegistryProcess) -> RegistryProcess:
    """The token-auth registry with app:1 pushed, and a refresh token for its user."""
    with pusher(token_registry) as c:
        push_image(c, f"{token_registry.host}/app:1", AMD)
    token_registry.token_server.refresh_tokens["refresh-me"] = token_registry.username
    token_registry.token_server.requests.clear()
    return token_registry


@pytest.mark.parametrize(
    "source",
    [
        # identitytoken in the Secret's auths
        "auths",
        # a helper answering Username "<token>"
        "helper",
    ],
)
def test_identity_token_against_token_registry(
    private_token: RegistryProcess, helpers: Helpers, tmp_path: Path, source: str
) -> None:
    # The identity token is exchanged at the real token service by an OAuth2 refresh grant
    # (POST), and distribution accepts the access token it returns.
    host = private_token.host
    if source == "auths":
        doc: dict[str, object] = {"auths": {host: {"identitytoken": "refresh-me"}}}
    else:
        helpers.answering("idt", "<token>", "refresh-me")
        doc = {"credHelpers": {host: "idt"}}
    with RegistryClient(auth_files=[write_config(tmp_path, doc)]) as client:
        assert client.resolve(f"{host}/app:1").layers == AMD.layers
    [request] = private_token.token_server.requests
    assert request["method"] == "POST"
    assert request["user"] == private_token.username
    assert request["form"]["grant_type"] == "refresh_token"
    assert request["form"]["scope"] == "repository:app:pull"


@pytest.mark.parametrize(
    "registry",
    [
        # htpasswd: the helper's user and password go to the registry as Basic
        "private",
        # token auth: they go to the token service as Basic, which issues the token
        "private_token",
    ],
)
def test_cred_helper(
    request: pytest.FixtureRequest, helpers: Helpers, tmp_path: Path, registry: str
) -> None:
    # credHelpers: the helper runs once, after the registry's first 401, with the registry on
    # stdin; its answer is reused for the next resolution.
    proc: RegistryProcess = request.getfixturevalue(registry)
    helpers.answering("private", proc.username or "", proc.password or "")
    config = write_config(tmp_path, {"credHelpers": {proc.host: "private"}})
    with RegistryClient(auth_files=[config]) as client:
        assert client.resolve(f"{proc.host}/app:1").layers == AMD.layers
        assert client.resolve(f"{proc.host}/app@{AMD.digest}").layers == AMD.layers
    assert helpers.calls() == [f"get {proc.host}"]
    if proc.token_server is not None:
        assert {r["user"] for r in proc.token_server.requests} == {proc.username}
