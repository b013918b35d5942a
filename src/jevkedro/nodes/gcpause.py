"""Pausing Python's cycle collector around bulk decoding.

Decoding a whole view (a snapshot's cells, a predictions log) makes millions of small containers
that either live as long as the view or die young without cycles. The cycle collector, triggered
by allocation counts, would walk every live one of them again and again: with it running, typed
decoding of a predictions log takes 2.5 times as long (``benchmarks/bench_scoring.py``). Reference
counting still frees everything as usual while the collector is paused; the previous state is
restored on exit.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
