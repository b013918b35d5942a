"""Pausing Python's cycle collector around bulk decoding.

Decoding a whole view (a snapshot's cells, a predictions log) makes millions of small containers
that either live as long as the view or die young without cycles. The cycle collector, triggered
by allocation counts, would walk every live one of them again and again: with it running, typed
decoding of a predictions log takes 2.5 times as long (``benchmarks/bench_scoring.py``). Reference
counting still frees everything as usual while the collector is paused; the previous state is
restored on exit.

Pausing only postpones one walk: the first allocation after the collector resumes starts a
collection of the youngest generation, which now holds every container made while paused (for the
Decision Index's 140k rows, about 0.5 s per stage). ``keep=True`` is for a block whose result is a
long-lived tree without cycles (decoded JSON, snapshot rows): on exit every object then alive is
moved to the collector's permanent generation (``gc.freeze``), so it is never walked again. Such
objects are still freed by reference counting; only a cycle among them would outlive its last
reference, which is why ``keep`` is opt-in.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused(keep: bool = False) -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    completed = False
    try:
        yield
        completed = True
    finally:
        if keep and completed:
            gc.freeze()  # the result is long-lived and acyclic: never walk it (module docstring)
        if was_enabled:
            gc.enable()
