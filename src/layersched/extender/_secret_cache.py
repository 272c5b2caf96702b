"""``SecretCache``: pods' pull secrets as the extender read them (each one's credentials by
registry, the read's outcome, and until when it counts), by (namespace, name), least
recently used first out, bounded per namespace and in all. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from layersched.registry import PullCredential

#: Secrets of one namespace remembered at most (one namespace cannot take every slot).
MAX_SECRETS_PER_NAMESPACE = 32
#: Secrets remembered in all (their credentials, a few hundred bytes each).
MAX_CACHED_SECRETS = 512

SecretKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class SecretRead:
    """What a secret held when read (empty: nothing usable), and until when it counts."""

    credentials: Mapping[str, PullCredential]
    outcome: str
    expires_at: float


class SecretCache:
    """Secrets read, by (namespace, name), least recently used first out; bounded per
    namespace and in all. Thread-safe."""

    def __init__(
        self,
        max_entries: int = MAX_CACHED_SECRETS,
        max_per_namespace: int = MAX_SECRETS_PER_NAMESPACE,
    ) -> None:
        self.max_entries = max_entries
        self.max_per_namespace = max_per_namespace
        self._entries: OrderedDict[SecretKey, SecretRead] = OrderedDict()
        self._per_namespace: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: SecretKey, now: float) -> SecretRead | None:
        """The read of ``key`` while it counts, else None."""
        with self._lock:
            read = self._entries.get(key)
            if read is None:
                return None
            if now >= read.expires_at:
                self._drop(key)
                return None
            self._entries.move_to_end(key)
            return read

    def put(self, key: SecretKey, read: SecretRead) -> None:
        with self._lock:
            if key in self._entries:
                self._drop(key)
            namespace = key[0]
            if self._per_namespace[namespace] >= self.max_per_namespace:
                oldest = next(k for k in self._entries if k[0] == namespace)
                self._drop(oldest)
                self.evictions += 1
            while len(self._entries) >= self.max_entries:
                self._drop(next(iter(self._entries)))
                self.evictions += 1
            self._entries[key] = read
            self._per_namespace[namespace] += 1

    def _drop(self, key: SecretKey) -> None:
        del self._entries[key]
        namespace = key[0]
        self._per_namespace[namespace] -= 1
        if not self._per_namespace[namespace]:
            del self._per_namespace[namespace]
