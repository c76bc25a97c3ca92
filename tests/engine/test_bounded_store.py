"""The one bounded store every cache is (server.storage.cache.Bounded): the least recently used out first past its
size, a value built once on a miss, an atomic change, a discard of the value seen only; safe across threads."""
from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from server.storage.cache import Bounded


def _filled(size: int, *keys: str) -> Bounded[int]:
    store: Bounded[int] = Bounded(size)
    for i, key in enumerate(keys):
        store.put(key, i)
    return store


@pytest.mark.parametrize("size, steps, kept", [
    pytest.param(2, lambda s: (s.put("a", 1), s.put("b", 2), s.put("c", 3)), {"b", "c"}, id="oldest-out"),
    pytest.param(2, lambda s: (s.put("a", 1), s.put("b", 2), s.peek("a"), s.put("c", 3)), {"a", "c"},
                 id="a-read-keeps-it"),
    pytest.param(2, lambda s: (s.put("a", 1), s.put("b", 2), s.put("a", 9), s.put("c", 3)), {"a", "c"},
                 id="a-write-keeps-it"),
    pytest.param(0, lambda s: s.put("a", 1), set(), id="size-zero-keeps-nothing"),
    pytest.param(3, lambda s: (s.put("a", 1), s.discard("a", 2)), {"a"}, id="discard-of-another-value"),
    pytest.param(3, lambda s: (s.put("a", 1), s.discard("a")), set(), id="discard"),
])
def test_what_is_kept(size: int, steps: Callable[[Bounded[int]], object], kept: set[str]) -> None:
    store: Bounded[int] = Bounded(size)
    steps(store)
    assert {k for k in "abc" if k in store} == kept and len(store) == len(kept)


def test_a_value_is_built_on_a_miss_only() -> None:
    store: Bounded[int] = Bounded(4)
    built: list[str] = []
    assert store.get("a", lambda: built.append("a") or 0) == 0  # a falsy value is kept too
    assert store.get("a", lambda: built.append("again") or 1) == 0
    assert built == ["a"] and store.get("missing") is None and store.peek("missing") is None


def test_it_serves_as_a_compiled_cache() -> None:
    store = _filled(2)
    store["k"] = 5  # what SQLAlchemy's compiled_cache does
    assert store.get("k") == 5


def test_a_change_is_atomic_across_threads() -> None:
    store: Bounded[int] = Bounded(8)
    threads = [threading.Thread(target=lambda: [store.change("n", lambda v: (v or 0) + 1) for _ in range(1000)])
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.peek("n") == 8000


def test_clear() -> None:
    store = _filled(3, "a", "b")
    store.clear()
    assert len(store) == 0
