"""Integration-test fixtures: real local processes started and stopped by the tests.

pytest refuses ``pytest_plugins`` outside the top-level conftest, so the
fixtures are imported by name here (run pytest as ``python -m pytest`` from the
repository root so that ``tests`` is importable).
"""

from tests.fixtures.containerd import containerd
from tests.fixtures.registry import auth_registry, private_token_registry, registry, token_registry

__all__ = [
    "auth_registry",
    "containerd",
    "private_token_registry",
    "registry",
    "token_registry",
]
