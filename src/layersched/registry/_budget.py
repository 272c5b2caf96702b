"""One memory budget for every cache a request can fill (issue 44).

What a stream of pods makes the extender remember (each platform's layer cache, its
failures, the registries refused) is charged to one :class:`MemoryBudget`, at what it
really costs (tests/unit/test_layer_cache_memory.py measures the charge against
tracemalloc). Past ``max_bytes`` the member holding the most gives its least recently
used entries, until the total is back under. So a flood aimed at one platform, or one
kind of entry, takes room from itself first, and the total never passes the budget
however many platforms and caches there are.

The members share the budget's lock (:attr:`MemoryBudget.lock`, re-entrant): a member
charges and evicts under it, so one member's insertion may evict another's entries
without two locks ever being taken in different orders. Nothing slow happens under it
(no network call, no parse).
"""

from __future__ import annotations

import threading
from typing import Protocol

#: What every cache of the budget may hold in all, in bytes as measured: 64 MiB holds
#: ~40,000 images of 10 layers, or ~200,000 failures, beside the inventory's own budget
#: (``--max-inventory-bytes``) in the extender's 512 MiB.
DEFAULT_BUDGET_BYTES = 64 * 1024 * 1024


class BudgetMember(Protocol):
    """A cache charged to a :class:`MemoryBudget` (called with the budget's lock held)."""

    @property
    def held_bytes(self) -> int:
        """What its entries cost now (as charged)."""
        ...

    def evict_oldest(self) -> bool:
        """Drop its least recently used entry (its charge released); False if it has none."""
        ...


class MemoryBudget:
    """Bytes charged by its members, within ``max_bytes`` (see the module docstring).

    Counters: ``held_bytes`` (charged now), ``evictions`` (entries dropped to make room).
    """

    def __init__(self, max_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"a memory budget of {max_bytes} bytes holds nothing")
        self.max_bytes = max_bytes
        #: The members' one lock (re-entrant: a member evicting may be called back).
        self.lock = threading.RLock()
        self.held_bytes = 0
        self.evictions = 0
        self._members: list[BudgetMember] = []

    @property
    def members(self) -> int:
        """How many caches are charged to it."""
        return len(self._members)

    def join(self, member: BudgetMember) -> None:
        """Charge ``member``'s entries to this budget from now on."""
        with self.lock:
            self._members.append(member)

    def leave(self, member: BudgetMember) -> None:
        """``member`` is gone (it released its charge first: what it holds is freed)."""
        with self.lock:
            self._members = [m for m in self._members if m is not member]

    def charge(self, delta_bytes: int) -> None:
        """Add (or, negative, release) bytes; the caller holds :attr:`lock`."""
        self.held_bytes += delta_bytes

    def settle(self) -> None:
        """Past the budget, drop least recently used entries of the member holding the
        most, until under it (the caller holds :attr:`lock`)."""
        while self.held_bytes > self.max_bytes and self._members:
            largest = max(self._members, key=lambda member: member.held_bytes)
            if not largest.evict_oldest():
                return
            self.evictions += 1
