"""Keeping the cyclic garbage collector off the hot path of a server that holds large state.

The server keeps ~10 long-lived objects per pod (records, indexes, memoised answers). Left in
the collected generations, they make every full collection walk the whole state, on the event
loop: a large cluster's watch events then cost up to twice as much, and requests wait
(docs/performance.md, "Garbage collection", has the figures of this module). The tools:

* `tune_gc()` at start-up raises the youngest generation's threshold, so bulk loads trigger
  far fewer collections (most request garbage is freed by reference counting anyway);
* `settle_heap()` after a bulk load or refresh moves what survived into the permanent
  generation (`gc.freeze()`). Replaced state is acyclic and still freed by reference
  counting. Once an hour it sweeps instead (unfreeze, one full collection, freeze), so that
  cyclic garbage frozen by accident is freed: the leak is bounded;
* `steady_gc()` once the server is ready (the initial lists synced) settles the heap and
  lowers the youngest threshold to `STEADY_GEN0_THRESHOLD`. A threshold counts net
  allocations, so whatever garbage only the cyclic GC frees (httpx's request and response
  objects, per scrape) piles up to it and is freed in one collection on the event loop: at
  the start-up threshold, a loop stall of tens to a hundred milliseconds each. At 2,000 a
  collection frees a twenty-fifth as much, for no more GC time in all; serving allocates
  little that survives, so the extra young collections are cheap, and a relist after
  start-up is rare enough to run at the steady threshold.
  From then on whatever survives a middle-generation collection is frozen too
  (`promote_survivors`): in steady state the survivors are state (usage rows of a scrape,
  records of a watch event), and left to pile up in the oldest generation they made each
  middle collection walk tens of thousands of them and the full collections walk them all.
  With the freeze, a middle collection walks only what the young ones since the last left,
  and the oldest generation stays empty. The middle threshold is 0 (every other young
  collection is a middle one): the slowest 1 % of requests are those that wait for a middle
  collection, so they must be short; more, shorter middle collections cost the same GC time in
  all and lower the p99. The price is the frozen cyclic garbage: a cycle that was still in use
  when it was frozen is only freed by the sweep (`sweep_frozen`: unfreeze, one full collection,
  freeze again) once an hour, a pause of O(tracked objects). The request path leaves no cycles
  (tests/server/test_chain_cycles.py); what does (exceptions kept with their tracebacks) is
  rare.
* Python versions: the thresholds suit CPython 3.11's collector, three
  generations triggered by allocation counts, which 3.12 and 3.13 keep. CPython 3.14's
  incremental collector has two generations (young, and an old one collected in increments)
  and reads the thresholds differently, so `tune_gc()` leaves it at the interpreter's
  defaults there and says so in a warning at start-up; `gc.freeze()` and the sweep are then
  not used either. tests/runtime/test_heap.py runs the tuning on every interpreter 3.11-3.13 it
  finds.
* `trim_heap()`: every `TRIM_EVERY` seconds, glibc's `malloc_trim(0)` (in a thread: ctypes releases
  the GIL) returns the free pages inside the heap to the system. Large transient buffers
  (long `pods/*` answers, list pages, TLS records) are served from the heap once glibc's mmap
  threshold has risen, and glibc only gives back the top of the heap: freed pages below live
  objects stay resident. Cost: the walk of the free lists, O(free chunks) a call; nothing on
  other C libraries.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import sys
import time
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

GEN0_THRESHOLD: Final = 50_000
STEADY_GEN0_THRESHOLD: Final = 2_000
#: Every other young collection is a middle one, whose survivors are frozen: the collections
#: are short (see the module docstring).
STEADY_GEN1_THRESHOLD: Final = 0
UNFREEZE_EVERY: Final = 3600.0
TRIM_EVERY: Final = 60.0

#: The collectors the tuning was measured on (see the module docstring): before 3.14.
GENERATIONAL: Final = (3, 11)
INCREMENTAL: Final = (3, 14)

_last_unfreeze = time.monotonic()
_tuned = False
_server = False


def tune_gc(version: tuple[int, int] | None = None) -> bool:
    """Raise the youngest generation's threshold (default 700) for a large-state server, on
    the three-generation collector of CPython 3.11-3.13 (`version`: `sys.version_info[:2]`);
    elsewhere leave the collector alone with a warning. Returns whether it tuned."""
    global _tuned, _server  # noqa: PLW0603 - process-wide GC state is global by nature
    _server = True
    running = version or (sys.version_info.major, sys.version_info.minor)
    if not GENERATIONAL <= running < INCREMENTAL:
        logger.warning(
            "Python %d.%d: the garbage collector tuning (measured on CPython 3.11-3.13's "
            "three generations) is not applied to this interpreter's collector; it runs "
            "with its defaults (docs/deployment.md, Python versions)",
            *running,
        )
        return False
    _tuned = True
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GEN0_THRESHOLD, max(gen1, 20), max(gen2, 10))
    return True


def settle_heap() -> None:
    """Collect young garbage, then freeze what is left out of future collections; once an
    hour, sweep the frozen heap instead (`sweep_frozen`: an unfreeze followed at once by a
    freeze would free nothing)."""
    if time.monotonic() - _last_unfreeze > UNFREEZE_EVERY:
        sweep_frozen()
        return
    gc.collect(1)
    gc.freeze()


def promote_survivors(phase: str, info: dict[str, int]) -> None:
    """A `gc.callbacks` hook: after a middle-generation collection, freeze what survived it
    (O(1): the generations' lists are spliced onto the permanent one)."""
    if phase == "stop" and info["generation"] == 1:
        gc.freeze()


def sweep_frozen() -> int:
    """Unfreeze, collect everything once, freeze again: frees the cycles frozen while still in
    use. O(tracked objects), on the calling thread. Returns the objects collected."""
    global _last_unfreeze  # noqa: PLW0603 - process-wide GC state is global by nature
    _last_unfreeze = time.monotonic()
    gc.unfreeze()
    collected = gc.collect()
    gc.freeze()
    return collected


async def steady_gc(
    ready: Callable[[], bool], *, poll: float = 1.0, sweep_every: float = UNFREEZE_EVERY
) -> None:
    """Once `ready()`, settle the heap, lower the young thresholds for serving and freeze what
    survives a middle collection; then sweep the frozen heap every `sweep_every` seconds until
    cancelled (see the module docstring). Polls `ready` every `poll` seconds until then; O(1)
    a poll."""
    if not _tuned:
        return  # not a server process that tuned its GC (tests, an embedding application)
    while not ready():  # noqa: ASYNC110 - readiness is a predicate, it has no event to await
        await asyncio.sleep(poll)
    settle_heap()
    _, _, gen2 = gc.get_threshold()
    gc.set_threshold(STEADY_GEN0_THRESHOLD, STEADY_GEN1_THRESHOLD, gen2)
    gc.callbacks.append(promote_survivors)
    try:
        while True:
            await asyncio.sleep(sweep_every)
            started = time.monotonic()
            collected = sweep_frozen()
            logger.info(
                "heap sweep: %d unreachable objects freed in %.0f ms",
                collected,
                (time.monotonic() - started) * 1e3,
            )
    finally:
        gc.callbacks.remove(promote_survivors)


async def trim_heap(every: float = TRIM_EVERY) -> None:
    """`malloc_trim(0)` every `every` seconds, in a thread (see the module docstring), in a
    server process (one that called `tune_gc`) with glibc; returns at once elsewhere. Runs
    until cancelled."""
    trim = malloc_trim() if _server else None
    while trim is not None:
        await asyncio.sleep(every)
        await asyncio.to_thread(trim, 0)


def malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    try:
        function: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError, TypeError):
        return None
    return function
