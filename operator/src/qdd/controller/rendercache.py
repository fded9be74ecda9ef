"""The plan and children of the last passes, per resource: a pass of an unchanged resource (the
resync, a child's status event) reuses them instead of planning and rendering again (45 ms of a
110 ms converged pass, cProfile, bench/README.md).

Per resource, only what its current object can ask for is kept: the entries of its uid and spec
hash (one per slot, placement and serving generation). A new spec or a new object of the same name
drops the older entries, and :meth:`RenderCache.forget` drops them all when the resource goes. The
cache used to be one LRU of 512 entries over every (uid, spec) ever seen: under create/delete churn
it grew by ~0.2 MiB per deployment created (make bench-soak, bench/results/soak-before.txt) up to
~100 MiB, the growth issue 23 measured.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
Who = tuple[str, str]  # (namespace, name)
MAX_RESOURCES = 512
"""Resources whose renders are kept (least recently used dropped first): a bound for an operator
that manages more than this, and for a deletion whose event it never saw."""


class RenderCache(Generic[V]):
    """``get(who, version, variant, compute)``: the value computed for ``who`` at ``version`` (uid and
    spec hash) and ``variant`` (slot, placement, serving generation), computed once."""

    def __init__(self, max_resources: int = MAX_RESOURCES):
        self.max_resources = max_resources
        self._lock = threading.Lock()
        self._by: OrderedDict[Who, tuple[Hashable, dict[Hashable, V]]] = OrderedDict()

    def get(self, who: Who, version: Hashable, variant: Hashable, compute: Callable[[], V]) -> V:
        with self._lock:
            held = self._by.get(who)
            if held is not None and held[0] == version and variant in held[1]:
                self._by.move_to_end(who)
                return held[1][variant]
        value = compute()  # outside the lock: planning takes tens of ms, other resources need not wait
        with self._lock:
            held = self._by.get(who)
            if held is None or held[0] != version:
                held = (version, {})  # a new spec or a new object of this name: the old renders are dead
                self._by[who] = held
            held[1][variant] = value
            self._by.move_to_end(who)
            while len(self._by) > self.max_resources:
                self._by.popitem(last=False)
        return value

    def forget(self, who: Who) -> None:
        """The resource is gone: drop its renders."""
        with self._lock:
            self._by.pop(who, None)

    def __len__(self) -> int:
        """Entries held, all resources together."""
        with self._lock:
            return sum(len(v) for _, v in self._by.values())

    def resources(self) -> list[Who]:
        with self._lock:
            return list(self._by)
