"""Registry credentials: dockerconfigjson files and identity tokens (in-process fakes).

Credential helpers run as real processes, so they are tested in
tests/integration/test_registry_credentials.py.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest

from layersched.core.errors import InputError
from layersched.registry import RegistryClient
from layersched.registry._config import IDENTITY_TOKEN_USER, load_registry_config
from tests.unit.test_registry_client import HOST, IMG, FakeRegistry, client_for


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_dockerconfigjson(tmp_path: Path) -> None:
    # A kubernetes.io/dockerconfigjson Secret's .dockerconfigjson, then a second file.
    secret = tmp_path / ".dockerconfigjson"
    secret.write_text(
        json.dumps(
            {
                "auths": {
                    "reg.lan:5000": {"auth": _b64("a:b")},
                    "https://index.docker.io/v1/": {"username": "hub", "password": "pw"},
                    # identitytoken wins over auth (ACR writes both, with a zero user)
                    "acr.example.io": {
                        "auth": _b64("00000000-0000-0000-0000-000000000000:"),
                        "identitytoken": "refresh",
                    },
                },
                "credHelpers": {"gcr.io": "gcloud"},
                "credsStore": "pass",
            }
        )
    )
    other = tmp_path / "config.json"
    other.write_text(
        json.dumps(
            {
                "auths": {"reg.lan:5000": {"auth": _b64("x:y")}},
                "credHelpers": {"gcr.io": "other", "ecr.example": "ecr-login"},
                "credsStore": "osxkeychain",
            }
        )
    )
    config = load_registry_config([secret, other, tmp_path / "missing.json"])
    # earlier files win key by key
    assert dict(config.credentials) == {
        "reg.lan:5000": ("a", "b"),
        "docker.io": ("hub", "pw"),
        "acr.example.io": (IDENTITY_TOKEN_USER, "refresh"),
    }
    assert dict(config.helpers) == {"gcr.io": "gcloud", "ecr.example": "ecr-login"}
    assert config.store == "pass"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # not JSON at all
        ("{", "fix or remove the file"),
        # JSON, but not an object
        ("[]", "not a JSON object"),
        # a helper "name" that is a path: never run
        ('{"credHelpers": {"r": "../../bin/sh"}}', "is not a name"),
        ('{"credsStore": 3}', "is not a name"),
    ],
    ids=["not-json", "not-object", "helper-path", "store-not-string"],
)
def test_bad_config_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        load_registry_config([path])
    assert str(path) in str(info.value)


def _config(tmp_path: Path, doc: dict[str, object]) -> list[Path]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    return [path]


class RefreshTokenRegistry(FakeRegistry):
    """A token service that takes only an OAuth2 refresh grant (how identity tokens are used)."""

    def __init__(self) -> None:
        super().__init__()
        self.token_requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/token":
            self.token_requests.append(request)
            form = dict(httpx.QueryParams(request.content.decode()))
            if request.method != "POST" or form.get("refresh_token") != "refresh-me":
                return httpx.Response(401, json={"details": "bad refresh token"})
            return httpx.Response(200, json={"access_token": "good", "expires_in": 300})
        if request.headers.get("Authorization") != "Bearer good":
            self.requests.append(request)
            challenge = (
                f'Bearer realm="http://{HOST}/token",service="svc",scope="repository:app:pull"'
            )
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        return super().__call__(request)


def test_identity_token_is_a_refresh_grant(tmp_path: Path) -> None:
    # (a helper answering Username "<token>" is covered in tests/integration)
    registry = RefreshTokenRegistry()
    doc = {"auths": {HOST: {"identitytoken": "refresh-me"}}}
    with client_for(registry, auth_files=_config(tmp_path, doc)) as client:
        assert client.resolve(f"{HOST}/app:1").digest == IMG.digest
    [token_request] = registry.token_requests
    form = dict(httpx.QueryParams(token_request.content.decode()))
    assert form == {
        "service": "svc",
        "scope": "repository:app:pull",
        "grant_type": "refresh_token",
        "refresh_token": "refresh-me",
        "client_id": "layersched",
    }
    # the identity token is never sent as Basic credentials
    assert "Authorization" not in token_request.headers


def test_missing_helper_is_an_error_at_startup(tmp_path: Path) -> None:
    # Found at construction, not on the first pod that needs it (a copied Docker Desktop
    # config names credsStore "desktop", which no extender image has).
    doc = {"credsStore": "layersched-absent", "credHelpers": {"gcr.io": "layersched-gone"}}
    with pytest.raises(InputError) as info:
        RegistryClient(auth_files=_config(tmp_path, doc))
    assert (
        "credential helpers that are not on PATH (docker-credential-layersched-absent, "
        "docker-credential-layersched-gone) in credHelpers/credsStore – install them"
    ) in str(info.value)
