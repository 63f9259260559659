"""Finding what stalls the event loop: garbage-collection pauses, and (on demand) the stack
the loop was running when it stalled.

* `GcPauses` times every collection of the cyclic GC (`gc.callbacks`: start and stop) and
  keeps, per generation, how many collections ran, their total and their longest pause since
  the last `take()`, plus a callback for a histogram. A collection is one C call on the
  event loop's thread: nothing else runs meanwhile, so its pause is a loop stall. Cost: two
  callbacks and a `perf_counter` each per collection (tens a second at most).
* `StallSampler` (diagnosis only: `CUSTOM_METRICS_SERVER_STALL_TRACE_MS=50` in the
  environment) is a daemon thread that checks a heartbeat the loop bumps every 10 ms; when
  the heartbeat is older than the threshold it samples the loop thread's stack (it gets the
  GIL at the interpreter's switch interval, 5 ms, unless the loop is inside one long C call
  such as a collection), and when the loop is back it logs one WARNING line: the stall's
  length, the share of it the loop thread spent on a CPU (its own CPU clock: a low share is
  the machine not scheduling the process, not the server's work), the GC pauses within it,
  and the most sampled stack (innermost frames last).
  Cost when on: a timer every 10 ms on the loop and a thread waking every 5 ms.

Must not: import anything of the package.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

STALL_TRACE_ENV: Final = "CUSTOM_METRICS_SERVER_STALL_TRACE_MS"
_HEARTBEAT: Final = 0.010
_POLL: Final = 0.005


class GcPauses:
    """Per-generation collection counts and pauses; `install()` once per process."""

    def __init__(self, observe: Callable[[int, float], None] | None = None) -> None:
        self.observe = observe
        self.count = [0, 0, 0]
        self.total = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0
        self._started_cpu = 0.0
        #: (ended at, generation, pause, CPU of the collecting thread meanwhile, objects
        #: collected): a pause much longer than its CPU is the process waiting for a core.
        self.recent: collections.deque[tuple[float, int, float, float, int]] = collections.deque(
            maxlen=64
        )

    def install(self) -> None:
        """Hook into `gc.callbacks` (idempotent)."""
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        """Unhook (the lag watcher does when it stops)."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.thread_time()
            return
        now = time.perf_counter()
        pause = now - self._started
        cpu = time.thread_time() - self._started_cpu
        generation = info.get("generation", 2)
        self.count[generation] += 1
        self.total[generation] += pause
        self.longest[generation] = max(self.longest[generation], pause)
        self.recent.append((now, generation, pause, cpu, info.get("collected", 0)))
        if self.observe is not None:
            self.observe(generation, pause)

    def since(self, start: float) -> list[tuple[int, float, float, int]]:
        """(generation, pause, CPU, collected) of the collections that ended after `start`
        (perf_counter)."""
        return [(g, p, c, n) for t, g, p, c, n in self.recent if t >= start]


class StallSampler:
    """See the module docstring; `start()` on the loop, `stop()` at shutdown."""

    def __init__(self, threshold: float, pauses: GcPauses | None = None) -> None:
        self.threshold = threshold
        self.pauses = pauses
        self.beat = time.perf_counter()
        self.stalls = 0
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Start the heartbeat on the running loop and the watching thread."""
        loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

        def tick() -> None:
            self.beat = time.perf_counter()
            self._handle = loop.call_later(_HEARTBEAT, tick)

        tick()
        self._thread = threading.Thread(target=self._watch, name="stall-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop both."""
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    def _watch(self) -> None:
        stacks: collections.Counter[tuple[str, ...]] = collections.Counter()
        began = seen_at = seen_cpu = 0.0
        # The loop thread's own CPU clock: a stall it spent off the CPU is the machine's.
        clock = time.pthread_getcpuclockid(self._loop_thread)
        while not self._stop.wait(_POLL):
            beat = self.beat
            late = time.perf_counter() - beat
            if late > self.threshold:
                if not stacks:
                    began = beat
                    seen_at, seen_cpu = time.perf_counter(), time.clock_gettime(clock)
                frame = sys._current_frames().get(self._loop_thread)
                stack: list[str] = []
                while frame is not None and len(stack) < 40:
                    code = frame.f_code
                    stack.append(f"{os.path.basename(code.co_filename)}:{code.co_name}")
                    frame = frame.f_back
                stacks[tuple(reversed(stack))] += 1
            elif stacks:
                on_cpu = (time.clock_gettime(clock) - seen_cpu) / max(1e-9, beat - seen_at)
                self._report(began, stacks, min(1.0, on_cpu))
                stacks = collections.Counter()

    def _report(
        self, began: float, stacks: collections.Counter[tuple[str, ...]], on_cpu: float
    ) -> None:
        self.stalls += 1
        length = self.beat - began
        gcs = self.pauses.since(began) if self.pauses is not None else []
        gc_text = (
            ", ".join(
                f"gen{g} {1000 * p:.0f}ms (CPU {1000 * c:.0f}ms, {n} collected)"
                for g, p, c, n in gcs
                if p >= 0.005
            )
            or "none"
        )
        stack, samples = stacks.most_common(1)[0]
        logger.warning(
            "event loop stalled %.0f ms (on a CPU %.0f %% of the time it was watched); GC "
            "pauses >= 5 ms in it: %s; stack (%d of %d samples): %s",
            1000 * length,
            100 * on_cpu,
            gc_text,
            samples,
            sum(stacks.values()),
            " > ".join(stack[-14:]),
        )


def stall_threshold_from_env() -> float | None:
    """The sampler's threshold in seconds from `CUSTOM_METRICS_SERVER_STALL_TRACE_MS`."""
    raw = os.environ.get(STALL_TRACE_ENV, "")
    try:
        value = float(raw) / 1000
    except ValueError:
        return None
    return value if value > 0 else None
