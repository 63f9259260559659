"""Streamed response bodies: chunks rendered on the event loop one at a time, gzipped on the
way when the client accepts it (the `/metrics/resources` exposition, 106 MB at 150,000 pods).

Memory: one chunk and the compressor's window (zlib level 1: ~256 KiB) beyond the socket's
buffer; the transport's flow control holds the next chunk back while the client is slow.
Cost: the chunks' own rendering, plus O(bytes) to compress at zlib level 1, the cheapest
(docs/performance.md, "Compressed `/metrics/resources`").
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Final

__all__ = ["accepts_gzip", "gzipped", "paced"]

#: zlib level 1, as kube-apiserver compresses its responses: the exposition's repeated label
#: sets compress 25x even so, at a third of the default level's CPU.
GZIP_LEVEL: Final = 1


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an `Accept-Encoding` value allows gzip (`gzip` or `*`, not with q=0), as Go's
    promhttp decides it. O(len(value))."""
    allowed = False
    for item in accept_encoding.split(","):
        name, _, params = item.partition(";")
        name = name.strip().lower()
        if name not in ("gzip", "*"):
            continue
        quality = params.strip().lower()
        refused = quality.startswith("q=") and quality[2:].strip() in ("0", "0.0", "0.00", "0.000")
        if name == "gzip":
            return not refused
        allowed = not refused
    return allowed


def gzipped(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The gzip stream (RFC 1952) of the chunks' concatenation, one piece per chunk that
    produced output. O(bytes)."""
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    for chunk in chunks:
        out = compressor.compress(chunk)
        if out:
            yield out
    yield compressor.flush()


async def paced(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Chunks made on the event loop one at a time (the first one may snapshot state that
    only the loop changes), giving the loop a turn after each: a 150,000-pod exposition is
    ~400 chunks of about 1 ms each, so health checks and metric requests are served
    meanwhile."""
    for chunk in chunks:
        yield chunk
        await asyncio.sleep(0)
