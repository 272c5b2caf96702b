"""The docker-registry fixture itself: it starts, answers, enforces auth and stops."""

from __future__ import annotations

import httpx
import pytest

from tests.fixtures.registry import RegistryProcess

pytestmark = pytest.mark.integration


def test_anonymous_registry_answers_and_logs(registry: RegistryProcess) -> None:
    # /v2/ is the API version check; an anonymous registry answers 200 with "{}".
    response = httpx.get(f"{registry.url}/v2/")
    assert response.status_code == 200
    assert response.headers["Docker-Distribution-Api-Version"] == "registry/2.0"
    assert ("GET", "/v2/", 200) in [(e.method, e.path, e.status) for e in registry.access_log()]


def test_auth_registry_demands_basic_credentials(auth_registry: RegistryProcess) -> None:
    # Without credentials: 401 with a Basic challenge; with the fixture's: 200.
    assert auth_registry.username and auth_registry.password
    anonymous = httpx.get(f"{auth_registry.url}/v2/")
    assert anonymous.status_code == 401
    assert anonymous.headers["WWW-Authenticate"].startswith("Basic ")
    authed = httpx.get(
        f"{auth_registry.url}/v2/", auth=(auth_registry.username, auth_registry.password)
    )
    assert authed.status_code == 200


def test_stop_ends_the_process(registry: RegistryProcess) -> None:
    # stop() is idempotent and leaves nothing listening.
    registry.stop()
    registry.stop()
    assert not registry.running
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{registry.url}/v2/", timeout=1.0)
