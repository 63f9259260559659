"""Reading the Prometheus HTTP API's answers: the `PrometheusError` every failure is, the
`{"status": ..., "data": ...}` envelope of a whole body, and the streamed reader of a
`/api/v1/series` listing (one series in memory at a time).

Owns the wire format of answers; it must not open connections, retry or choose GET or POST
(`prometheus.client`). Cost: `decode` is one orjson decode of the body; `SeriesReader` is O(body)
time and O(one series + shapes) memory.

PURE: no I/O (bytes in, values out).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Literal

import orjson

from custom_metrics_server.prometheus.metric_registry import SeriesShape, series_shape

__all__ = ["ErrorKind", "PrometheusError", "SeriesReader", "decode"]

ErrorKind = Literal["unavailable", "timeout", "rejected"]


class PrometheusError(Exception):
    """A failed call; `kind` is `unavailable`, `timeout` or `rejected`."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


_STRUCTURAL: Final = re.compile(rb'[{}"\\]')
_SUCCESS: Final = re.compile(rb'"status"\s*:\s*"success"')


class SeriesReader:
    """Incremental reader of a `/api/v1/series` body (`{"status":"success","data":[{...},...]}`):
    each series object is cut out of the byte stream by tracking braces outside strings, decoded
    alone and reduced to its shape at once. O(body) time, O(one series + shapes) memory.
    """

    def __init__(self) -> None:
        self.shapes: set[SeriesShape] = set()
        self._depth = 0
        self._in_string = False
        self._carry_skip = 0  # an escape at the end of the last chunk skips this chunk's first byte
        self._object = bytearray()
        self._head = b""
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        """Consume the next piece of the body."""
        if len(self._head) < 64:
            self._head += chunk[: 64 - len(self._head)]
        self._tail = (self._tail + chunk)[-64:]
        start: int | None = 0 if self._depth >= 2 else None
        skip_until = self._carry_skip
        for match in _STRUCTURAL.finditer(chunk):
            index = match.start()
            if index < skip_until:
                continue
            char = chunk[index]
            if self._in_string:
                if char == 0x5C:  # a backslash escapes the next byte
                    skip_until = index + 2
                elif char == 0x22:
                    self._in_string = False
            elif char == 0x22:
                self._in_string = True
            elif char == 0x7B:
                self._depth += 1
                if self._depth == 2:
                    start = index
            elif char == 0x7D:
                if self._depth == 2 and start is not None:
                    self._object += chunk[start : index + 1]
                    self._emit()
                    start = None
                self._depth -= 1
        if self._depth >= 2 and start is not None:
            self._object += chunk[start:]
        self._carry_skip = max(0, skip_until - len(chunk))

    def _emit(self) -> None:
        try:
            labels = orjson.loads(self._object)
        except orjson.JSONDecodeError:
            labels = None
        self._object.clear()
        if isinstance(labels, dict) and (shape := series_shape(labels)) is not None:
            self.shapes.add(shape)

    def finish(self, where: str) -> set[SeriesShape]:
        """The shapes, once the body is complete and was a successful listing."""
        if (
            self._depth != 0
            or self._in_string
            or not self._head.lstrip().startswith(b"{")
            or not (_SUCCESS.search(self._head) or _SUCCESS.search(self._tail))
        ):
            raise PrometheusError("unavailable", f"{where} answered 200 with a malformed body")
        return self.shapes


def decode(status: int, reason: str, content: bytes, where: Callable[[], str]) -> Any:
    """The `data` of a successful answer, else the `PrometheusError` it means (`where()`
    names the server, called on failures only).

    Cost: one orjson decode of the body."""
    try:
        document = orjson.loads(content)
    except orjson.JSONDecodeError:
        document = None
    if status == 200 and isinstance(document, dict) and document.get("status") == "success":
        return document.get("data")
    detail = ""
    error_type = ""
    if isinstance(document, dict):
        detail = str(document.get("error", ""))
        error_type = str(document.get("errorType", ""))
    if status == 200:
        # Not the API's envelope: a proxy's page, a truncated body, another service.
        raise PrometheusError("unavailable", f"{where()} answered 200 with a malformed body")
    if not detail:
        detail = content.decode("utf-8", "replace").strip()[:300] or reason
    message = f"{where()} answered {status}: {detail}"
    if error_type == "timeout" or status == 504:
        raise PrometheusError("timeout", message)
    if status in (400, 422) and error_type in ("bad_data", "execution"):
        raise PrometheusError("rejected", message)
    # 5xx, 429, 401/403 (credentials), 404 (wrong URL): unavailable until an operator or
    # the engine fixes it; the metric's configuration is not at fault.
    raise PrometheusError("unavailable", message)
