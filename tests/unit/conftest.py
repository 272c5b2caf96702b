"""Unit-test fixtures that are in-process servers (pytest refuses ``pytest_plugins``
outside the top-level conftest, so they are imported by name here)."""

from tests.fixtures.kube_api import kube_api, kube_api_server

__all__ = ["kube_api", "kube_api_server"]
