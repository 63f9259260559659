"""The render caches: encoded bytes the encoders (`api.wire`, `api.protobuf`) keep between
requests, so that a sample living across many requests is encoded once and a long answer of
the same samples is the same body. Every cache of the served bytes is here; the encoders hold
none, and `domain` only carries the slot a sample's fragments live in.

* **Fragments of a sample** (`fragments`): one item's bytes, in the sample's own `cache` slot
  (`Sample.cache`, `ExternalSample.cache`), keyed by the encoder's key (item shape and
  encoding, plus the echoed selector when there is one). At most 8 keys a sample (keys carry
  request-chosen selectors; beyond, the slot starts over). A sample is an immutable value and
  a backend publishes a new one for a new value, so a fragment is never stale; it lives as
  long as its sample. Samples made for one answer (`reused=False`) skip it.
* **Aligned lists** (`fragments`, lists of at least 64 samples): the last list encoded under
  each key, its samples and their fragments; where a new list holds the same sample object at
  the same position, the fragment is taken from it without a lookup on the sample. Keyed by
  the encoder's key, at most 256 keys (then it starts over). Never stale: a position is
  reused only for the identical sample.
* **Bodies** (`remembered_body`, `remember_body`; JSON `MetricValueList`s of at least 64
  items): the last body of each (key, head), with its samples; an answer of the same sample
  objects in the same order is that body. At most 4 bodies (the oldest written goes first),
  none over 2 MiB. Never stale, for the same reason.
* **Seconds as text** (`rfc3339_second`): an RFC 3339 time per whole second, a pure function
  memoised (4,096 seconds, least recently used first): items of one answer mostly share
  their second.

All of them rely on one rule of the domain: a sample is not changed after it is made (its
`labels` included), so identity says its bytes are the same. Not thread-safe: the event loop
that serves requests owns them. Cost: a fragment lookup is one dict lookup (a miss: the
encoder's cost plus a 0.2 us exact-size copy); an aligned list is a C pass comparing
references, plus a lookup per changed position; a remembered body is a C pass comparing
references. Tests compare every answer with the uncached encoders' (tests/api).

PURE: no I/O.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from itertools import compress
from operator import is_not
from typing import Any, Final, Protocol, TypeVar

__all__ = [
    "ALIGNED_MIN",
    "BODY_MIN_ITEMS",
    "clear",
    "fragments",
    "remember_body",
    "remembered_body",
    "rfc3339_second",
]


class _Renderable(Protocol):
    @property
    def cache(self) -> dict[object, bytes]: ...

    @property
    def reused(self) -> bool: ...


R = TypeVar("R", bound=_Renderable)

#: Lists at least this long are compared with the last list of their key.
ALIGNED_MIN: Final = 64
_ALIGNED_LIMIT: Final = 256
#: The last fragments list of each key: (its samples, their fragments).
_ALIGNED: dict[str, tuple[Sequence[Any], list[bytes]]] = {}
#: Keys of one sample's fragments before its slot starts over.
_SAMPLE_KEYS: Final = 8

#: Bodies of at least this many items are remembered.
BODY_MIN_ITEMS: Final = 64
_BODIES_LIMIT: Final = 4
_BODY_MAX: Final = 2 << 20
#: The last bodies of long answers, by (fragment key, head): (their samples, the body). A
#: `pods/*` answer over 3,000 pods polled faster than its nodes are scraped is the same list of
#: samples most of the time; comparing 3,000 references is ~15 us where joining the 840 KB
#: again is ~0.2 ms plus its page faults.
_BODIES: dict[tuple[str, bytes], tuple[tuple[Any, ...], bytes]] = {}


def fragments(samples: Sequence[R], key: str, encode: Callable[[R], bytes]) -> list[bytes]:
    """Each sample's encoded item, memoised on the sample under `key` (a str: its hash is
    computed once per request, not per item) unless the samples are single-use. O(samples).

    A list of at least `ALIGNED_MIN` samples is also compared, position by position and in C,
    with the last list encoded under `key`: where the sample is the same object its fragment
    is taken from that list, so a `pods/*` answer over thousands of pods that changed in a few
    places looks up only those. The caller owns the returned list.

    A memoised fragment is an exact-size copy of what `encode` returned: orjson (3.12 on)
    returns its output in the buffer it wrote it to, at least 4 KiB and up to 10x the length
    (a 300-byte item holds 4,097 bytes), and one fragment is kept per pod asked about, so at
    150,000 pods the HPAs' answers held ~300 MiB of buffer tails. The copy costs 0.2 us, on a
    miss only."""
    if samples and not samples[0].reused:
        return [encode(sample) for sample in samples]
    if len(samples) < ALIGNED_MIN:  # the usual HPA answer: one sample, or a few dozen
        return [_fragment(sample, key, encode) for sample in samples]
    last = _ALIGNED.get(key)
    if last is not None and len(last[0]) == len(samples):
        out = last[1].copy()
        for i in compress(range(len(samples)), map(is_not, samples, last[0])):
            out[i] = _fragment(samples[i], key, encode)
    else:
        out = [_fragment(sample, key, encode) for sample in samples]
    if len(_ALIGNED) >= _ALIGNED_LIMIT:
        _ALIGNED.clear()
    _ALIGNED[key] = (tuple(samples), out.copy())  # a copy: the caller may reuse its list
    return out


def _fragment(sample: R, key: str, encode: Callable[[R], bytes]) -> bytes:
    cache = sample.cache
    fragment = cache.get(key)
    if fragment is None:
        if len(cache) > _SAMPLE_KEYS:
            cache.clear()
        fragment = cache[key] = bytes(memoryview(encode(sample)))
    return fragment


def remembered_body(key: str, head: bytes, samples: Sequence[Any]) -> bytes | None:
    """The body last remembered for (`key`, `head`) if it was made of these very samples in
    this order, else None. O(1) below `BODY_MIN_ITEMS` items, else one C pass over them."""
    if len(samples) < BODY_MIN_ITEMS:
        return None
    last = _BODIES.get((key, head))
    if last is not None and len(last[0]) == len(samples) and not any(map(is_not, samples, last[0])):
        return last[1]
    return None


def remember_body(key: str, head: bytes, samples: Sequence[Any], body: bytes) -> None:
    """Remember `body` as the answer of these samples under (`key`, `head`), if the list is
    long enough to be worth it and the body small enough to keep. O(samples) (a tuple)."""
    if len(samples) < BODY_MIN_ITEMS or len(body) > _BODY_MAX:
        return
    _BODIES.pop((key, head), None)
    if len(_BODIES) >= _BODIES_LIMIT:
        del _BODIES[next(iter(_BODIES))]  # the least recently written
    _BODIES[(key, head)] = (tuple(samples), body)


@functools.lru_cache(maxsize=4096)
def rfc3339_second(second: int) -> str:
    """metav1.Time's text for a whole second since the epoch, in UTC (memoised)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))


def clear() -> None:
    """Forget the aligned lists, the bodies and the seconds (not the fragments on samples,
    which live and die with their samples): for tests and benchmarks that compare a cold
    encoder with a warm one."""
    _ALIGNED.clear()
    _BODIES.clear()
    rfc3339_second.cache_clear()
