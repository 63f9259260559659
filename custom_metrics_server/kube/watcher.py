"""List and watch one Kubernetes collection into a consumer's store: client-go's Reflector.

This module owns the list/watch protocol loop for one collection path (`/api/v1/pods`,
`/apis/apps/v1/replicasets`) and nothing else: it keeps no objects (each decoded dict is handed
to the `WatchSink` and dropped), knows no kinds, and never touches the consumer's data. The
consumer (the Kubernetes backend's store) implements `WatchSink` and keeps compact records.
It is one piece on purpose: list, watch, relist and backoff are one loop sharing the
resourceVersion and the failure count, as client-go's `reflector.go` is one file; split, that
state would travel between modules.

The protocol follows client-go `tools/cache/reflector.go` and `tools/pager/pager.go`:

1. LIST in pages of `page_size` (`limit`, `continue`) as a consistent read (no
   `resourceVersion`, so every page comes from one etcd snapshot and large lists never arrive
   as one document). `list_started`, then `listed` per object in order, then `list_finished`;
   the consumer deletes what was not listed. A continue token that expires mid-list (410) is
   answered as the pager does: one full list without `limit`, after a fresh `list_started`.
2. WATCH from the list's `resourceVersion` with `allowWatchBookmarks=true` and `timeoutSeconds`
   jittered in [`watch_timeout`, 2 x `watch_timeout`) to spread reconnects. ADDED, MODIFIED and
   DELETED go to `event`; BOOKMARK only moves the resourceVersion (so a later re-watch does not
   start from a compacted version); every object event moves it too.
3. A clean end of the watch (the server's timeout) re-watches from the last resourceVersion,
   without listing. A watch that ends within a second without any event is treated as an error
   (client-go's "very short watch"), so a misbehaving proxy cannot make us spin.
4. 410 Gone / Expired, whether an HTTP status or an ERROR watch event carrying a Status with
   code 410 (or "Too large resource version"), means the resourceVersion is no longer served:
   relist at once (a second one in a row without progress backs off first).
5. Any other failure (connection refused or reset, a stream cut mid-chunk, a read timeout,
   5xx, 429, a malformed document) backs off exponentially with full jitter —
   `random() x min(backoff_max, backoff_initial x 2^(n-1))` after the n-th failure in a row —
   then resumes: a watch from the last resourceVersion if there is one, else a list. Progress
   (a completed list, or any event on a watch) resets the count.

Costs: a list is O(objects) time and O(page_size) memory (two pages: the next one is
requested before the current one is fed to the sink, so the API server's work on it overlaps
ours); a watch event is O(1) plus the
sink's own work. `run()` never raises except `CancelledError`; exceptions raised by the sink
are logged (rate-limited), counted in `stats.sink_errors` and skipped, as client-go's
`HandleError` does, so one bad object cannot stall the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random as _random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from custom_metrics_server.domain import Readiness
from custom_metrics_server.kube.client import GoneError, KubeApiError
from custom_metrics_server.kube.wire_codec import WatchEvent, WireCodec, dict_event, dict_page

logger = logging.getLogger(__name__)

#: A watch that ends sooner than this without any event is an error (client-go's threshold).
MIN_WATCH_SECONDS: Final = 1.0
#: How long past `timeoutSeconds` a silent watch stream may stay open before we give up on it.
READ_TIMEOUT_MARGIN: Final = 30.0
#: Sink exceptions are logged at most once per this many seconds per reflector.
SINK_ERROR_LOG_INTERVAL: Final = 10.0

#: Listed objects handed to the sink between two yields to the event loop (~2-3 ms of pods).
FEED_CHUNK: Final = 50

_OBJECT_EVENTS: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})


class WatchSink(Protocol):
    """The consumer of a `Reflector`: a store of compact records, keyed as it likes."""

    def list_started(self) -> None:
        """A (re)list begins; `listed` objects follow."""
        ...

    def listed(self, obj: dict[str, Any]) -> None:
        """One object of the (paginated) list, in order."""
        ...

    def list_finished(self) -> None:
        """The list is complete: objects not listed since `list_started` are gone."""
        ...

    def event(self, type: str, obj: dict[str, Any]) -> None:
        """An ADDED, MODIFIED or DELETED watch event (BOOKMARK and ERROR never get here)."""
        ...


class ListWatchClient(Protocol):
    """What a `Reflector` needs of `KubeClient`."""

    async def get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document."""
        ...

    def watch(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """Decoded watch events until the server ends the stream."""
        ...

    async def get_raw(self, path: str, params: Mapping[str, str] | None = None) -> bytes:
        """GET a JSON document's bytes (for a reflector with a `WireCodec`)."""
        ...

    def watch_lines(
        self, path: str, params: Mapping[str, str], *, read_timeout: float
    ) -> AsyncIterator[bytes]:
        """A watch stream's lines, undecoded (for a reflector with a `WireCodec`)."""
        ...


@dataclass
class ReflectorStats:
    """Counters of one reflector, for self-metrics."""

    lists: int = 0  #: full lists completed
    pages: int = 0  #: list pages received
    watches: int = 0  #: watch requests made
    events: int = 0  #: ADDED/MODIFIED/DELETED events handed to the sink
    bookmarks: int = 0  #: BOOKMARK events received
    errors: int = 0  #: failures followed by a backoff
    relists: int = 0  #: lists forced by 410 Gone / Expired
    sink_errors: int = 0  #: exceptions raised by the sink (skipped)


class _Expired(Exception):
    """The resourceVersion is gone (410) or unknown to the server: relist."""


class _ProtocolError(Exception):
    """The server said something a reflector cannot use."""


def _is_too_large(code: int, message: str) -> bool:
    """kube-apiserver's "Too large resource version" (a 504 Timeout): relist from scratch."""
    return code == 504 and "Too large resource version" in message


class Reflector:
    """Keeps a `WatchSink` in step with one collection; see the module docstring."""

    def __init__(
        self,
        client: ListWatchClient,
        *,
        path: str,
        sink: WatchSink,
        name: str,
        page_size: int = 500,
        watch_timeout: float = 300.0,
        backoff_initial: float = 0.8,
        backoff_max: float = 30.0,
        label_selector: str = "",
        field_selector: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random: Callable[[], float] = _random.random,
        codec: WireCodec | None = None,
    ) -> None:
        self.path = path
        self._codec = codec  # None: every object a dict (`get_json`, `watch`)
        self.name = name
        self._client = client
        self._sink = sink
        self._page_size = page_size
        self._watch_timeout = watch_timeout
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._selectors: dict[str, str] = {}
        if label_selector:
            self._selectors["labelSelector"] = label_selector
        if field_selector:
            self._selectors["fieldSelector"] = field_selector
        self._clock = clock
        self._sleep = sleep
        self._random = random
        self._stats = ReflectorStats()
        self._rv = ""
        self._needs_list = True
        self._synced = False
        self._synced_event = asyncio.Event()
        self._failures = 0  # in a row, without progress
        self._expired_in_a_row = 0
        self._last_error: str | None = None
        self._last_logged_error = ""
        self._sink_error_logged_at = float("-inf")

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (list, object event or bookmark); "" before a list."""
        return self._rv

    @property
    def selectors(self) -> Mapping[str, str]:
        """The `labelSelector`/`fieldSelector` parameters of its lists and watches."""
        return dict(self._selectors)

    @property
    def synced(self) -> bool:
        """Whether a first full list has reached the sink."""
        return self._synced

    async def wait_synced(self) -> None:
        """Return once a first full list has reached the sink."""
        await self._synced_event.wait()

    @property
    def stats(self) -> ReflectorStats:
        """Live counters (the same object every time)."""
        return self._stats

    @property
    def last_error(self) -> str | None:
        """The last failure, cleared by progress."""
        return self._last_error

    def readiness(self) -> Readiness:
        """Ready once the first full list is in the sink; until then, what it waits for."""
        if self._synced:
            return Readiness(ready=True)
        reason = f"waiting for the first list of {self.path}"
        if self._last_error:
            reason += f" (last error: {self._last_error})"
        return Readiness(ready=False, reason=reason)

    async def run(self) -> None:
        """List, then watch, forever; returns only by cancellation. Call it once."""
        while True:
            try:
                if self._needs_list:
                    await self._list()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except _Expired as err:
                self._needs_list = True
                self._stats.relists += 1
                self._expired_in_a_row += 1
                logger.info("%s: %s; relisting %s", self.name, err, self.path)
                if self._expired_in_a_row > 1:  # the fresh list's version expired too
                    await self._back_off(err)
            except Exception as err:  # a reflector outlives every failure
                await self._back_off(err)

    # ------------------------------------------------------------------ list

    def _list_params(self) -> dict[str, str]:
        params = dict(self._selectors)
        if self._page_size > 0:
            params["limit"] = str(self._page_size)
        return params

    async def _page(
        self, params: Mapping[str, str], token: str
    ) -> tuple[list[dict[str, Any]], str, str] | None:
        """One list page as (items, resourceVersion, continue); None if `token` expired."""
        query = {**params, "continue": token} if token else params
        try:
            if self._codec is None:
                page = dict_page(await self._client.get_json(self.path, query))
            else:
                page = self._codec.page(await self._client.get_raw(self.path, query))
        except GoneError as err:
            if token:
                return None
            raise _Expired(str(err)) from err
        except KubeApiError as err:
            if _is_too_large(err.code, err.message):
                raise _Expired(str(err)) from err
            raise
        except (KeyError, TypeError, ValueError) as err:
            raise _ProtocolError(f"malformed list of {self.path}: {err!r}") from err
        items, resource_version, token = page
        if not resource_version:  # a watch from "" would replay every object as ADDED
            raise _ProtocolError(f"the list of {self.path} has no resourceVersion")
        return items, resource_version, token

    async def _list(self) -> None:
        """One full list into the sink: O(objects) time, O(page_size) memory."""
        started_at = self._clock()
        params = self._list_params()
        token = resource_version = ""
        started = False
        pages = count = 0
        sink = self._sink
        # The next page is asked for before this one is fed to the sink, so the API server
        # prepares it while we decode and apply (the two overlap: one page more in memory).
        pending: asyncio.Task[tuple[list[dict[str, Any]], str, str] | None] | None = None
        try:
            while True:
                if pending is None:
                    page = await self._page(params, token)
                else:
                    page, pending = await pending, None
                if page is None:
                    # The pager's answer to an expired continue token: one full list. The
                    # objects of the earlier pages are listed again after a fresh
                    # `list_started`, so one deleted in between is not kept alive by its mark.
                    logger.info(
                        "%s: continue token expired mid-list; listing %s in one request",
                        self.name,
                        self.path,
                    )
                    params.pop("limit", None)
                    token = ""
                    started = False
                    continue
                items, resource_version, token = page
                del page
                if token:
                    pending = asyncio.ensure_future(self._page(params, token))
                self._stats.pages += 1
                pages += 1
                if not started:
                    sink.list_started()
                    started = True
                count += await self._feed(items)
                del items
                if not token:
                    break
        finally:
            if pending is not None:  # cancelled, or the sink's list_started raised
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
        sink.list_finished()
        first = not self._synced
        self._rv = resource_version
        self._needs_list = False
        self._synced = True
        self._synced_event.set()
        self._stats.lists += 1
        self._progress(watching=False)
        logger.info(
            "%s: %s %d objects of %s at resourceVersion %s in %.2fs (%d pages)",
            self.name,
            "listed" if first else "relisted",
            count,
            self.path,
            resource_version,
            self._clock() - started_at,
            pages,
        )

    async def _feed(self, items: list[dict[str, Any]]) -> int:
        """Hand one page's objects to the sink, yielding to the event loop every
        `FEED_CHUNK` objects (so the next page's request goes out and is read meanwhile, and
        health probes wait at most one chunk); how many objects there were."""
        listed = self._sink.listed
        for start in range(0, len(items), FEED_CHUNK):
            if start:
                await asyncio.sleep(0)
            for item in items[start : start + FEED_CHUNK]:
                try:
                    listed(item)
                except Exception as err:  # the sink's bug, not the stream's
                    self._sink_failed("listed", item, err)
        return len(items)

    # ------------------------------------------------------------------ watch

    async def _watch(self) -> None:
        """One watch request until the server ends it: O(1) per event plus the sink's work."""
        timeout = max(1, int(self._watch_timeout * (1.0 + self._random())))
        params = {
            **self._selectors,
            "watch": "true",
            "resourceVersion": self._rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout),
        }
        started_at = self._clock()
        stats = self._stats
        stats.watches += 1
        received = 0
        sink_event = self._sink.event
        read_timeout = timeout + READ_TIMEOUT_MARGIN
        codec = self._codec
        stream: AsyncIterator[Any] = (
            self._client.watch(self.path, params, read_timeout=read_timeout)
            if codec is None
            else self._client.watch_lines(self.path, params, read_timeout=read_timeout)
        )
        try:
            async for line in stream:
                try:
                    event: WatchEvent = dict_event(line) if codec is None else codec.event(line)
                    kind, obj, resource_version = event
                    if kind in _OBJECT_EVENTS:
                        try:
                            sink_event(kind, obj)
                        except Exception as err:  # the sink's bug
                            self._sink_failed(kind, obj, err)
                        stats.events += 1
                    elif kind == "BOOKMARK":
                        stats.bookmarks += 1
                    elif kind == "ERROR":
                        raise self._status_error(obj)
                    else:
                        logger.debug("%s: ignoring watch event of type %r", self.name, kind)
                        continue
                except (KeyError, TypeError, ValueError) as err:
                    raise _ProtocolError(f"malformed watch event: {err!r}") from err
                self._rv = resource_version
                if not received:
                    self._progress(watching=True)
                received += 1
        except GoneError as err:
            raise _Expired(str(err)) from err
        except KubeApiError as err:
            if _is_too_large(err.code, err.message):
                raise _Expired(str(err)) from err
            raise
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        if not received and self._clock() - started_at < MIN_WATCH_SECONDS:
            raise _ProtocolError("very short watch: it ended within a second without any event")

    @staticmethod
    def _status_error(obj: Any) -> Exception:
        """The exception an ERROR event's Status stands for."""
        status = obj if isinstance(obj, dict) else {}
        code = status.get("code")
        reason = str(status.get("reason", ""))
        message = str(status.get("message", ""))
        code = code if isinstance(code, int) else 0
        if code == 410 or reason in ("Expired", "Gone"):
            return _Expired(f"watch: {code} {reason}: {message}")
        if _is_too_large(code, message):
            return _Expired(f"watch: {code} {reason}: {message}")
        return KubeApiError(code, reason, f"watch error event: {message}")

    # ------------------------------------------------------------------ failures

    def _progress(self, *, watching: bool) -> None:
        """A list completed or a watch delivered: failures in a row start over (410s in a
        row only once a watch delivers, so a list whose version is gone at once backs off)."""
        self._failures = 0
        if watching:
            self._expired_in_a_row = 0
        self._last_error = None
        self._last_logged_error = ""

    def backoff_ceiling(self, failures: int) -> float:
        """The upper bound of the delay after `failures` failures in a row."""
        exponent = min(failures - 1, 62)
        return float(min(self._backoff_max, self._backoff_initial * 2.0**exponent))

    async def _back_off(self, err: BaseException) -> None:
        self._failures += 1
        self._stats.errors += 1
        text = str(err) or type(err).__name__
        self._last_error = text
        delay = self.backoff_ceiling(self._failures) * self._random()
        # One line per distinct failure, then one per ten repeats: a down API server does not
        # flood the log, a new kind of failure is always shown.
        if text != self._last_logged_error or self._failures % 10 == 0:
            logger.warning(
                "%s: %s %s failed: %s; retrying in %.2fs (failure %d in a row)",
                self.name,
                "list" if self._needs_list else "watch",
                self.path,
                text,
                delay,
                self._failures,
            )
            self._last_logged_error = text
        else:
            logger.debug("%s: %s; retrying in %.2fs", self.name, text, delay)
        await self._sleep(delay)

    def _sink_failed(self, what: str, obj: Any, err: Exception) -> None:
        self._stats.sink_errors += 1
        now = self._clock()
        if now - self._sink_error_logged_at >= SINK_ERROR_LOG_INTERVAL:
            self._sink_error_logged_at = now
            if isinstance(obj, dict):
                metadata = obj.get("metadata") or {}
                namespace, name = metadata.get("namespace", ""), metadata.get("name", "?")
            else:  # a codec's object: its metadata as attributes, when it has them
                metadata = getattr(obj, "metadata", None)
                namespace = getattr(metadata, "namespace", "") or ""
                name = getattr(metadata, "name", "?") or "?"
            logger.error(
                "%s: the sink failed on %s of %s/%s (%d sink errors so far)",
                self.name,
                what,
                namespace,
                name,
                self._stats.sink_errors,
                exc_info=err,
            )
