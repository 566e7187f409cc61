"""Per-core analysis work on a few threads.

The per-TensorCore steps of the analysis are numpy array passes (sorts,
binary searches, gathers, bincounts), and numpy releases the GIL inside
them: on a run folder of tens of cores, a couple of threads overlap them.
Results come back in input order and each call is independent, so the
output does not depend on the thread count (tested with one thread).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Upper bound on the threads (also bounded by the CPU count); 1 turns the
#: pool off (the tests compare both).
MAX_THREADS = 4


def map_ordered(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """[fn(x) for x in items], on up to MAX_THREADS threads when there are
    several items; the first exception (in input order) propagates."""
    todo = list(items)
    n = min(MAX_THREADS, os.cpu_count() or 1, len(todo))
    if n < 2:
        return [fn(x) for x in todo]
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, todo))
