"""Live CRI-O fixtures: a real registry with the seed's two images pushed, and a private
CRI-O built by ``make crio`` (``make crio-live``; not part of ``make test``). Imported by
name, as tests/integration/conftest.py does."""

from tests.fixtures.crio import crio
from tests.fixtures.registry import registry
from tests.integration.test_cri import pushed

__all__ = ["crio", "pushed", "registry"]
