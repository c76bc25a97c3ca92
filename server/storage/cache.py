"""The one bounded store every cache of the server is: values by key, the least recently used out first past its
size, safe across threads. Each store is made by the server context or by an object it owns (never at module
level), so that a server's caches live and die with it."""
from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar, overload

V = TypeVar("V")
_MISSING = object()


class Bounded(Generic[V]):
    """At most `size` values by key (0: none kept). A value is built outside the lock: two threads may build the
    same one, the last kept. It also serves as SQLAlchemy's `compiled_cache` (`get(key)`, `store[key] = value`)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def peek(self, key: Hashable) -> V | None:
        """The value kept (now the most recently used), without building it; None when there is none."""
        with self._lock:
            found = self._items.get(key, _MISSING)
            if found is _MISSING:
                return None
            self._items.move_to_end(key)
            return found  # type: ignore[return-value]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    __setitem__ = put

    @overload
    def get(self, key: Hashable) -> V | None: ...

    @overload
    def get(self, key: Hashable, build: Callable[[], V]) -> V: ...

    def get(self, key: Hashable, build: Callable[[], V] | None = None) -> V | None:
        """The value kept; on a miss, the one `build` makes (then kept), or None without `build`."""
        found = self.peek(key)
        if found is None and build is not None:
            found = build()
            self.put(key, found)
        return found

    def change(self, key: Hashable, update: Callable[[V | None], V]) -> V:
        """Replace the value (None: none kept) by what `update` makes of it, atomically (`update` runs under the
        lock: keep it short, no I/O)."""
        with self._lock:
            value = update(self._items.get(key))
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
            return value

    def discard(self, key: Hashable, value: V | None = None) -> None:
        """Drop the key's value (only when it is still `value`, if given)."""
        with self._lock:
            if value is None or self._items.get(key) is value:
                self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
