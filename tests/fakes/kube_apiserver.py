"""A real local kube-apiserver for tests: list, watch, discovery and the node proxy over HTTP/1.1.

This module owns the fake API server every Kubernetes-facing test talks to. It is a real TCP
server (plain HTTP on 127.0.0.1, in a background thread with its own event loop) that speaks the
exact wire protocol the client code sees from kube-apiserver, so tests exercise our real httpx
client, chunked decoding, connection pooling and reconnects. From the package it imports only
`selectors` (to evaluate `labelSelector`) and `Connection` (to hand out client settings).

What it serves, for a configurable set of resources (`ResourceType`):

* LIST `GET /api/v1/pods`, `/api/v1/namespaces/{ns}/pods`, `/apis/{g}/{v}/...`: a `*List` with
  `metadata.resourceVersion`; `limit`/`continue` pagination over a consistent snapshot (etcd
  MVCC semantics: every page shows the state at the first page's resourceVersion);
  `resourceVersion` + `resourceVersionMatch=Exact`; `labelSelector` and `fieldSelector`
  (dotted paths: `metadata.name`, `spec.nodeName`, `status.phase`, ...). A continue token
  whose snapshot was compacted, or issued before `expire_continue_tokens()`, answers
  410 `Expired` with the upstream message.
* WATCH (`?watch=1` or `watch=true`): newline-delimited `{"type", "object"}` events over chunked
  transfer: the changes after `resourceVersion` (all current objects as ADDED first when it is
  empty or "0"), selector transitions as upstream (an object that stops matching is DELETED),
  BOOKMARK events with only `metadata.resourceVersion` when `allowWatchBookmarks=true` (on
  demand, every `bookmark_interval` s, and just before `timeoutSeconds` ends the watch),
  a clean end after `timeoutSeconds` (capped by `max_watch_seconds`; the connection is then
  closed, `Connection: close`). A resourceVersion older than the compaction point is 410
  `Expired`: in-stream as an ERROR event carrying a Status (`watch_gone_as="event"`, what
  kube-apiserver's watch cache does) or as an HTTP 410 Status (`watch_gone_as="http"`).
  Compaction never takes events from watches already open, as with the watch cache.
* GET of one object; discovery (`/api`, `/api/v1`, `/apis`, `/apis/{g}`, `/apis/{g}/{v}`) built
  from the registered resources, with subresources and preferred versions; the node proxy
  `GET /api/v1/nodes/{node}/proxy/{path}` serving configured bodies (kubelet expositions);
  the pod proxy `GET /api/v1/namespaces/{ns}/pods/[https:]{pod}[:{port}]/proxy/{path}`
  forwarding to the pod's `status.podIP` (plain HTTP; `https:` with no verification, as
  kube-apiserver does) and relaying the answer, or 503 when the pod cannot be reached and 404
  when it does not exist, with kube-apiserver's messages.
* Writes as a Lease holder makes them: POST to a collection creates (409 `AlreadyExists`),
  PUT to an object replaces it (404 when absent, 409 `Conflict` on a stale
  `metadata.resourceVersion`); both take a new resourceVersion and reach the watches.

Resource versions are one global counter, as in etcd: every change of any resource takes the
next number, so a pod watch sees gaps where nodes changed (and bookmarks matter).

Test-facing API (thread-safe; call it from sync or async tests alike)::

    with FakeKubeApiServer() as api:                 # listening on http://127.0.0.1:<port>
        client = KubeClient(api.connection())
        api.add("pods", pod("default", "web-1"))     # ADDED, returns the stored copy
        api.update("pods", changed)                  # MODIFIED (whole object)
        api.apply_many("pods", pods, copies=False)   # bulk create-or-replace, one wake-up
        api.delete("pods", "web-1", namespace="default")
        api.compact()                                # forget history: old RVs now 410
        api.drop_watches(); api.end_watches(); api.send_bookmarks()
        api.fail_next(kind="list", code=500)         # inject errors (or drops, or ERROR events)
        api.delay_next(kind="list", path="/api/v1/nodes", seconds=3)  # answer late
        api.restart(keep_state=True)                 # same port; connections are cut
        api.set_node_proxy("node-1", "# kubelet text\\n...")
        api.count("list", "/api/v1/pods")            # requests seen, per kind and path
        await api.wait_for_watches(1)                # async helpers never block the test's loop

Blocking calls (`start`, `stop`, `restart`, `drop_watches`, ...) return once the server thread
has done the work; they never wait on the caller's event loop, so they are safe inside async
tests. Errors are Kubernetes `Status` objects with upstream reasons and messages.

Kept honest by tests/controlplane/test_differential.py: the same state in this fake and in a
real kube-apiserver must give the server's same answers.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import datetime
import http
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import unquote, unquote_plus

import orjson

from custom_metrics_server.kube.config import Connection
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import Selector
from custom_metrics_server.machinery.validation import SelectorError

__all__ = [
    "CONTINUE_EXPIRED_MESSAGE",
    "DEFAULT_RESOURCES",
    "FakeKubeApiServer",
    "RecordedRequest",
    "ResourceType",
    "node",
    "pod",
    "status",
]

_T = TypeVar("_T")
Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

CONTINUE_EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this response "
    "to retrieve the remainder of the results. Continuing with the provided token results in an "
    "inconsistent list - objects that were created, modified, or deleted between the time the "
    "first chunk was returned and now may show up in the list."
)
DEFAULT_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    """One served resource: where it lives and what discovery says about it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    #: `singularName` in discovery; None means `kind.lower()`, "" sends an empty one (old servers)
    singular: str | None = None
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ("status",)
    verbs: tuple[str, ...] = DEFAULT_VERBS

    @property
    def key(self) -> str:
        """The `{resource}` string naming it: `pods`, `deployments.apps`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def group_version(self) -> str:
        """`v1`, `apps/v1`."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_version(self) -> str:
        """`apiVersion` of the objects."""
        return self.group_version

    def path(self, namespace: str | None = None) -> str:
        """The collection path: `/api/v1/pods`, `/apis/apps/v1/namespaces/ns/deployments`."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else "/api/v1"
        if namespace is not None:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"


#: What the Kubernetes backend watches, plus leases for discovery realism.
DEFAULT_RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "pods", "Pod", short_names=("po",)),
    ResourceType(
        "",
        "v1",
        "nodes",
        "Node",
        namespaced=False,
        short_names=("no",),
        subresources=("proxy", "status"),
    ),
    ResourceType(
        "",
        "v1",
        "namespaces",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        subresources=("finalize", "status"),
    ),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", short_names=("rs",)),
    ResourceType("apps", "v1", "deployments", "Deployment", short_names=("deploy",)),
    ResourceType("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",)),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", short_names=("ds",)),
    ResourceType("batch", "v1", "jobs", "Job"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", subresources=()),
)


def status(code: int, reason: str, message: str) -> Obj:
    """A `metav1.Status` failure, as kube-apiserver encodes it."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def pod(
    namespace: str,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    node_name: str = "",
    phase: str = "Running",
    **spec: Any,
) -> Obj:
    """A small valid Pod document (extra keyword arguments go into `spec`)."""
    body: Obj = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}], **spec},
        "status": {"phase": phase},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


def node(name: str, *, labels: Mapping[str, str] | None = None, cpu: str = "4") -> Obj:
    """A small valid Node document."""
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
    }


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server answered (or refused)."""

    method: str
    path: str
    params: Mapping[str, str]
    #: "list", "watch", "get", "discovery", "proxy", "create", "replace" or "other"
    kind: str
    #: the Authorization header the client sent
    authorization: str = ""
    #: `time.monotonic()` when the request head was read
    at: float = 0.0


@dataclass
class _Failure:
    kind: str | None
    path: str | None
    count: int
    code: int
    reason: str
    message: str
    drop: bool
    as_event: bool


@dataclass
class _Delay:
    kind: str | None
    path: str | None
    count: int
    seconds: float


@dataclass
class _ProxyAnswer:
    body: bytes
    code: int
    delay: float
    content_type: str


@dataclass(slots=True)
class _Change:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    resource: str
    key: Key
    obj: Obj
    prev: Obj | None
    line: bytes  # the encoded watch event, newline-terminated


@dataclass
class _Snapshot:
    keys: list[Key]
    objs: list[Obj]


@dataclass(eq=False)
class _Watch:
    resource: str
    namespace: str | None
    allow_bookmarks: bool
    writer: asyncio.StreamWriter
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    drop: bool = False
    end: bool = False
    bookmark: bool = False
    #: every change up to here was sent; compaction keeps what live watches still need
    cursor: int = 0


@dataclass
class _Request:
    method: str
    path: str
    params: dict[str, str]
    headers: dict[str, str]
    body: bytes = b""


class _FieldSelector:
    """`a.b=c,d!=e` over dotted paths of the object (missing fields are "")."""

    def __init__(self, text: str) -> None:
        self.terms: list[tuple[tuple[str, ...], bool, str]] = []
        for raw in filter(None, text.split(",")):
            if "!=" in raw:
                path, value = raw.split("!=", 1)
                self.terms.append((tuple(path.split(".")), False, value))
            elif "=" in raw:
                path, value = raw.replace("==", "=", 1).split("=", 1)
                self.terms.append((tuple(path.split(".")), True, value))
            else:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{raw}'")

    def matches(self, obj: Obj) -> bool:
        for path, equal, value in self.terms:
            current: Any = obj
            for part in path:
                current = current.get(part) if isinstance(current, dict) else None
            if (str(current) if current is not None else "") == value:
                if not equal:
                    return False
            elif equal:
                return False
        return True


_TRUE = ("1", "true")
_STREAM_HEADERS = (
    ("Content-Type", "application/json"),
    ("Transfer-Encoding", "chunked"),
    ("Connection", "close"),
)


def _event_line(kind: str, obj: Obj) -> bytes:
    """One watch event on the wire."""
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


def _copy(obj: Mapping[str, Any]) -> Obj:
    """A deep copy of a JSON document."""
    copied: Obj = orjson.loads(orjson.dumps(obj))
    return copied


def _now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _encode_continue(rv: int, key: Key) -> str:
    start = f"{key[0]}/{key[1]}\x00"
    raw = orjson.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, Key] | None:
    try:
        document = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        namespace, _, name = str(document["start"]).rstrip("\x00").partition("/")
        return int(document["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError):
        return None


class FakeKubeApiServer:
    """A kube-apiserver double on a real socket; see the module docstring for the API."""

    def __init__(
        self,
        resources: Iterable[ResourceType] = DEFAULT_RESOURCES,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        start_resource_version: int = 100,
    ) -> None:
        self.host = host
        self._port = port
        self._lock = threading.RLock()
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_key: dict[str, ResourceType] = {}
        self._preferred: dict[str, str] = {}
        for resource_type in resources:
            self.register(resource_type)
        self._rv = start_resource_version
        self._compacted = start_resource_version
        self._continue_floor = 0
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._changes: list[_Change] = []
        self._change_rvs: list[int] = []
        self._snapshots: dict[tuple[str, int], _Snapshot] = {}
        self._failures: list[_Failure] = []
        self._delays: list[_Delay] = []
        self._discovery_failures: dict[str, tuple[int, str, str]] = {}
        self._proxy: dict[tuple[str, str], _ProxyAnswer] = {}
        self._requests: list[RecordedRequest] = []
        #: how an expired watch resourceVersion is answered: "event" (an ERROR event in a 200
        #: stream, as the watch cache does) or "http" (a 410 Status response)
        self.watch_gone_as: Literal["event", "http"] = "event"
        #: periodic BOOKMARK events (seconds) on watches that allow them; None: only on demand
        #: and before a watch times out
        self.bookmark_interval: float | None = None
        #: send a BOOKMARK right before `timeoutSeconds` ends a watch (kube-apiserver does)
        self.bookmark_before_timeout = True
        #: upper bound of a watch's life whatever `timeoutSeconds` says (tests use < 1 s)
        self.max_watch_seconds: float | None = None
        #: watch length when the client sends no `timeoutSeconds`
        self.default_watch_seconds = 1800.0
        #: seconds every discovery answer waits after the server read its state (tests of
        #: what a discovery under way sees)
        self.discovery_delay = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._generation = 0
        #: connection tasks, with their writer once the stream is set up
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter | None] = {}
        self._sockets: set[socket.socket] = set()
        self._watches: set[_Watch] = set()
        self._wake_pending = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The bound port (fixed after the first start, reused by restarts)."""
        return self._port

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>`."""
        return f"http://{self.host}:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the server is accepting connections."""
        return self._listener is not None

    def connection(self) -> Connection:
        """Connection settings for `KubeClient` (plain HTTP, a dummy bearer token)."""
        return Connection(host=self.url, token="fake-token")

    def start(self) -> None:
        """Listen (on the same port as before after a stop); idempotent."""
        if self._thread is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._loop = loop
            self._thread = threading.Thread(target=run, name="fake-kube-apiserver", daemon=True)
            self._thread.start()
            ready.wait()
        self._call(self._start_serving)

    def stop(self) -> None:
        """Stop listening and cut every connection mid-stream; the state is kept."""
        if self._loop is not None:
            self._call(self._stop_serving)

    def restart(self, *, keep_state: bool = True) -> None:
        """Stop and start on the same port. Without `keep_state` every object and the whole
        history are forgotten (resourceVersions keep growing: old ones answer 410)."""
        self.stop()
        if not keep_state:
            with self._lock:
                self._objects.clear()
                self._changes.clear()
                self._change_rvs.clear()
                self._snapshots.clear()
                self._rv += 1  # every earlier version is now unknown: watches from them 410
                self._compacted = self._rv
        self.start()

    def close(self) -> None:
        """Stop serving and end the server thread."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self.stop()

        async def shutdown() -> None:
            await loop.shutdown_asyncgens()
            loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), loop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._thread = None

    def _call(self, function: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        if self._loop is None:
            raise RuntimeError("the fake API server is not started")
        return asyncio.run_coroutine_threadsafe(function(), self._loop).result(timeout=30)

    # Our own accept callback rather than `asyncio.start_server`: on Python 3.11 a connection
    # accepted just before `Server.close()` is leaked half-open (its transport creation fails on
    # the closed server and the error is swallowed), which leaves a client waiting forever.
    # Connections never get cancelled before they own their socket: a stop bumps the
    # generation, and a connection still being set up closes itself when it sees that.

    async def _start_serving(self) -> None:
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((self.host, self._port))
        listener.listen(128)
        listener.setblocking(False)
        self._port = listener.getsockname()[1]
        self._listener = listener
        asyncio.get_running_loop().add_reader(listener.fileno(), self._accept, listener)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # BlockingIOError: nothing more to accept now
                return
            conn.setblocking(False)
            self._sockets.add(conn)
            task = asyncio.ensure_future(self._on_socket(conn, self._generation))
            self._connections[task] = None

    async def _on_socket(self, conn: socket.socket, generation: int) -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            if generation != self._generation:
                conn.close()
                return
            try:
                reader, writer = await asyncio.open_connection(sock=conn, limit=1 << 20)
            except OSError:
                conn.close()
                return
            if generation != self._generation:
                writer.transport.abort()
                return
            self._connections[task] = writer
            await self._on_connection(reader, writer)
        finally:
            self._connections.pop(task, None)
            self._sockets.discard(conn)

    async def _stop_serving(self) -> None:
        listener, self._listener = self._listener, None
        if listener is None:
            return
        asyncio.get_running_loop().remove_reader(listener.fileno())
        listener.close()
        self._generation += 1
        for watch in self._watches:
            watch.drop = True
        tasks = list(self._connections)
        for task, writer in list(self._connections.items()):
            if writer is not None:
                writer.transport.abort()
                task.cancel()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=5)
            for task in late:  # a busy machine: end them rather than leave them to the GC
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=5)
        # Every accepted socket is closed by the time the stop returns, whatever state its
        # connection reached: one left to the garbage collector surfaces as a ResourceWarning
        # (an error under `filterwarnings = error`) in whichever test runs next.
        for conn in list(self._sockets):
            conn.close()
        self._sockets.clear()

    # ------------------------------------------------------------------ resources and objects

    def register(self, resource_type: ResourceType, *, preferred: bool = False) -> None:
        """Serve another resource (a CRD appearing at runtime); `preferred` makes its version
        the group's preferred one (otherwise the first registered version of a group is)."""
        with self._lock:
            self._types[(resource_type.group, resource_type.version, resource_type.plural)] = (
                resource_type
            )
            self._by_key[resource_type.key] = resource_type
            if preferred or resource_type.group not in self._preferred:
                self._preferred[resource_type.group] = resource_type.version

    def unregister(self, resource: str) -> None:
        """Stop serving a resource (a CRD deleted); its objects are forgotten."""
        with self._lock:
            resource_type = self._by_key.pop(resource)
            del self._types[(resource_type.group, resource_type.version, resource_type.plural)]
            self._objects.pop(resource, None)
            if not any(t.group == resource_type.group for t in self._types.values()):
                self._preferred.pop(resource_type.group, None)

    def fail_discovery(
        self,
        group_version: str,
        *,
        code: int = 503,
        reason: str = "ServiceUnavailable",
        message: str = "the server is currently unable to handle the request",
    ) -> None:
        """Make `/apis/{group_version}` (or `/api/v1` for "v1") fail, as an unavailable
        aggregated API does; `heal_discovery` undoes it."""
        with self._lock:
            self._discovery_failures[group_version] = (code, reason, message)

    def heal_discovery(self, group_version: str | None = None) -> None:
        """Undo `fail_discovery` for one group version, or for all."""
        with self._lock:
            if group_version is None:
                self._discovery_failures.clear()
            else:
                self._discovery_failures.pop(group_version, None)

    @property
    def resource_version(self) -> int:
        """The last resourceVersion handed out."""
        return self._rv

    @property
    def compacted_resource_version(self) -> int:
        """Watches and continue tokens older than this answer 410."""
        return self._compacted

    def _type(self, resource: str) -> ResourceType:
        try:
            return self._by_key[resource]
        except KeyError:
            raise KeyError(f"resource {resource!r} is not registered") from None

    def _normalise(self, resource_type: ResourceType, obj: Mapping[str, Any]) -> tuple[Key, Obj]:
        stored = _copy(obj)
        stored.setdefault("kind", resource_type.kind)
        stored.setdefault("apiVersion", resource_type.api_version)
        metadata = stored.setdefault("metadata", {})
        if not metadata.get("name"):
            raise ValueError("metadata.name is required")
        if resource_type.namespaced:
            metadata.setdefault("namespace", "default")
        else:
            metadata.pop("namespace", None)
        return (metadata.get("namespace", ""), metadata["name"]), stored

    def _record_change(
        self, resource: str, kind: str, key: Key, obj: Obj, prev: Obj | None
    ) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        objects = self._objects.setdefault(resource, {})
        if kind == "DELETED":
            del objects[key]
        else:
            objects[key] = obj
        line = orjson.dumps({"type": kind, "object": obj}) + b"\n"
        self._changes.append(_Change(self._rv, kind, resource, key, obj, prev, line))
        self._change_rvs.append(self._rv)

    def add(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Create an object (ADDED); raises if it exists. Returns a copy of what is stored."""
        return self.apply_many(resource, [obj], mode="add")[0]

    def update(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Replace an existing object (MODIFIED); raises if it does not exist."""
        return self.apply_many(resource, [obj], mode="update")[0]

    def apply(self, resource: str, obj: Mapping[str, Any]) -> Obj:
        """Create or replace."""
        return self.apply_many(resource, [obj])[0]

    def apply_many(
        self,
        resource: str,
        objs: Iterable[Mapping[str, Any]],
        *,
        mode: Literal["add", "update", "apply"] = "apply",
        copies: bool = True,
    ) -> list[Obj]:
        """Create or replace many objects in one go (one resourceVersion each, watches woken
        once at the end); the fast path for benchmarks. Returns copies of the stored objects
        (none when `copies` is false: copying is most of the cost)."""
        resource_type = self._type(resource)
        out: list[Obj] = []
        with self._lock, self._notifying():
            objects = self._objects.setdefault(resource, {})
            for obj in objs:
                key, stored = self._normalise(resource_type, obj)
                prev = objects.get(key)
                if prev is not None and mode == "add":
                    raise ValueError(f'{resource} "{key[1]}" already exists')
                if prev is None and mode == "update":
                    raise KeyError(f'{resource} "{key[1]}" not found')
                if prev is not None:
                    metadata, before = stored["metadata"], prev["metadata"]
                    metadata.setdefault("uid", before.get("uid"))
                    metadata.setdefault("creationTimestamp", before.get("creationTimestamp"))
                else:
                    stored["metadata"].setdefault("uid", str(uuid.uuid4()))
                    stored["metadata"].setdefault("creationTimestamp", _now_rfc3339())
                self._record_change(
                    resource, "ADDED" if prev is None else "MODIFIED", key, stored, prev
                )
                if copies:
                    out.append(stored)
        return [_copy(obj) for obj in out]

    @contextlib.contextmanager
    def _notifying(self) -> Iterator[None]:
        try:
            yield
        finally:
            self._notify()

    def delete(self, resource: str, name: str, *, namespace: str = "") -> Obj | None:
        """Delete an object (DELETED, carrying its last state at the deletion's
        resourceVersion); None when it did not exist."""
        resource_type = self._type(resource)
        key = (namespace if resource_type.namespaced else "", name)
        with self._lock:
            prev = self._objects.get(resource, {}).get(key)
            if prev is None:
                return None
            final = _copy(prev)
            self._record_change(resource, "DELETED", key, final, prev)
        self._notify()
        return _copy(final)

    def get(self, resource: str, name: str, *, namespace: str = "") -> Obj | None:
        """A copy of a stored object, or None."""
        resource_type = self._type(resource)
        key = (namespace if resource_type.namespaced else "", name)
        with self._lock:
            found = self._objects.get(resource, {}).get(key)
            return None if found is None else _copy(found)

    def objects(self, resource: str) -> dict[Key, Obj]:
        """Every stored object of a resource by (namespace, name), copied."""
        with self._lock:
            current = dict(self._objects.get(resource, {}))
        return {key: _copy(obj) for key, obj in current.items()}

    def compact(self, resource_version: int | None = None) -> None:
        """Forget the history up to `resource_version` (default: now), like etcd compaction:
        watches from older resourceVersions and older continue tokens get 410 Expired."""
        with self._lock:
            target = self._rv if resource_version is None else min(resource_version, self._rv)
            # Like the watch cache, open watches never lose events: only new requests from
            # older versions see the compaction.
            keep_from = min([target, *(w.cursor for w in self._watches)])
            cut = bisect.bisect_right(self._change_rvs, keep_from)
            del self._changes[:cut], self._change_rvs[:cut]
            self._compacted = max(self._compacted, target)
            self._snapshots = {k: v for k, v in self._snapshots.items() if k[1] >= target}
        self._notify()

    def expire_continue_tokens(self) -> None:
        """Every continue token handed out so far answers 410 Expired from now on."""
        with self._lock:
            self._continue_floor = self._rv + 1

    # ------------------------------------------------------------------ faults and watches

    def fail_next(
        self,
        *,
        kind: str | None = None,
        path: str | None = None,
        count: int = 1,
        code: int = 500,
        reason: str = "InternalError",
        message: str = 'an error on the server ("injected") has prevented the request from succeeding',
        drop: bool = False,
        as_event: bool = False,
    ) -> None:
        """The next `count` requests of `kind` ("list", "watch", "get", "discovery", "proxy";
        None: any) whose path starts with `path` fail: with a Status of `code`, by a dropped
        connection (`drop`), or for watches with a 200 stream holding one ERROR event
        (`as_event`)."""
        with self._lock:
            self._failures.append(
                _Failure(kind, path, count, code, reason, message, drop, as_event)
            )

    def delay_next(
        self,
        *,
        kind: str | None = None,
        path: str | None = None,
        seconds: float,
        count: int = 1,
    ) -> None:
        """The next `count` requests of `kind` whose path starts with `path` are answered
        `seconds` late (a slow or overloaded API server); other requests are not held up."""
        with self._lock:
            self._delays.append(_Delay(kind, path, count, seconds))

    def drop_watches(self, resource: str | None = None) -> int:
        """Cut every open watch (of `resource`, or all) mid-stream, without the final chunk.
        Returns how many were cut."""
        return self._signal_watches(resource, "drop")

    def end_watches(self, resource: str | None = None) -> int:
        """End every open watch cleanly, as `timeoutSeconds` does (with the final bookmark
        when allowed and `bookmark_before_timeout`)."""
        return self._signal_watches(resource, "end")

    def send_bookmarks(self, resource: str | None = None) -> int:
        """Send a BOOKMARK at the current resourceVersion on every watch that allows them."""
        return self._signal_watches(resource, "bookmark")

    def _signal_watches(self, resource: str | None, what: str) -> int:
        if self._loop is None:
            return 0

        async def signal() -> int:
            count = 0
            for watch in self._watches:
                if resource is None or watch.resource == resource:
                    setattr(watch, what, True)
                    if what == "drop":
                        watch.writer.transport.abort()
                    watch.wake.set()
                    count += 1
            return count

        return self._call(signal)

    def active_watches(self, resource: str | None = None) -> int:
        """How many watches are open now."""
        with self._lock:
            return sum(1 for w in self._watches if resource is None or w.resource == resource)

    async def wait_for_watches(
        self, count: int = 1, *, resource: str | None = None, within: float = 5.0
    ) -> None:
        """Wait (without blocking the caller's event loop) until `count` watches are open."""
        deadline = time.monotonic() + within
        while self.active_watches(resource) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.active_watches(resource)} watches open, want {count}")
            await asyncio.sleep(0.005)

    def set_node_proxy(
        self,
        node_name: str,
        body: str | bytes | None,
        *,
        path: str = "metrics/resource",
        code: int = 200,
        delay: float = 0.0,
        content_type: str = "text/plain; version=0.0.4; charset=utf-8",
    ) -> None:
        """Serve `body` at `/api/v1/nodes/{node}/proxy/{path}` with `code` after `delay` s;
        None removes it. A node with no body answers 503 if the Node object exists, else 404."""
        with self._lock:
            if body is None:
                self._proxy.pop((node_name, path), None)
            else:
                raw = body.encode() if isinstance(body, str) else body
                self._proxy[(node_name, path)] = _ProxyAnswer(raw, code, delay, content_type)

    # ------------------------------------------------------------------ request accounting

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request seen, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def count(self, kind: str | None = None, path: str | None = None) -> int:
        """Requests seen of `kind` and exactly at `path` (None: any)."""
        with self._lock:
            return sum(
                1
                for r in self._requests
                if (kind is None or r.kind == kind) and (path is None or r.path == path)
            )

    def reset_counts(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._requests.clear()

    # ------------------------------------------------------------------ internals: state

    def _notify(self) -> None:
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self._wake_watches)

    def _wake_watches(self) -> None:
        self._wake_pending = False
        for watch in self._watches:
            watch.wake.set()

    def _snapshot(self, resource: str, rv: int) -> _Snapshot:
        """The objects of `resource` at `rv`, sorted by key (call with the lock held)."""
        cached = self._snapshots.get((resource, rv))
        if cached is not None:
            return cached
        state = dict(self._objects.get(resource, {}))
        for change in reversed(self._changes[bisect.bisect_right(self._change_rvs, rv) :]):
            if change.resource != resource:
                continue
            if change.type == "ADDED":
                state.pop(change.key, None)
            elif change.prev is not None:
                state[change.key] = change.prev
        keys = sorted(state)
        snapshot = _Snapshot(keys, [state[k] for k in keys])
        if len(self._snapshots) >= 8:
            self._snapshots.pop(next(iter(self._snapshots)))
        self._snapshots[(resource, rv)] = snapshot
        return snapshot

    def _take_delay(self, kind: str, path: str) -> float:
        with self._lock:
            for delay in self._delays:
                if (delay.kind is None or delay.kind == kind) and (
                    delay.path is None or path.startswith(delay.path)
                ):
                    delay.count -= 1
                    if delay.count <= 0:
                        self._delays.remove(delay)
                    return delay.seconds
        return 0.0

    def _take_failure(self, kind: str, path: str) -> _Failure | None:
        with self._lock:
            for failure in self._failures:
                if (failure.kind is None or failure.kind == kind) and (
                    failure.path is None or path.startswith(failure.path)
                ):
                    failure.count -= 1
                    if failure.count <= 0:
                        self._failures.remove(failure)
                    return failure
        return None

    # ------------------------------------------------------------------ internals: HTTP

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                if not await self._dispatch(request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            writer.transport.abort()
        finally:
            writer.close()

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
        line = await reader.readline()
        if not line.strip():
            return None
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0") or 0)
        body = await reader.readexactly(length) if length else b""
        path, _, query = target.partition("?")
        params: dict[str, str] = {}
        for part in filter(None, query.split("&")):
            name, _, value = part.partition("=")
            params[unquote_plus(name)] = unquote_plus(value)
        return _Request(method, path, params, headers, body)

    @staticmethod
    def _head(code: int, headers: Sequence[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {code} {http.HTTPStatus(code).phrase}"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append("Audit-Id: " + str(uuid.uuid4()))
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _respond(
        self,
        writer: asyncio.StreamWriter,
        code: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> bool:
        head = self._head(
            code, [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        )
        writer.write(head + body)
        await writer.drain()
        return True

    async def _respond_status(
        self, writer: asyncio.StreamWriter, code: int, reason: str, message: str
    ) -> bool:
        return await self._respond(writer, code, orjson.dumps(status(code, reason, message)))

    async def _dispatch(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        route = self._route(request)
        kind = route[0]
        if request.method == "POST" and kind == "list":
            kind = "create"
        elif request.method == "PUT" and kind == "get":
            kind = "replace"
        with self._lock:
            self._requests.append(
                RecordedRequest(
                    request.method,
                    request.path,
                    dict(request.params),
                    kind,
                    authorization=request.headers.get("authorization", ""),
                    at=time.monotonic(),
                )
            )
        delay = self._take_delay(kind, request.path)
        if delay:
            await asyncio.sleep(delay)
        failure = self._take_failure(kind, request.path)
        if failure is not None:
            if failure.drop:
                writer.transport.abort()
                return False
            if failure.as_event and kind == "watch":
                writer.write(self._head(200, _STREAM_HEADERS))
                error = status(failure.code, failure.reason, failure.message)
                self._write_chunk(writer, _event_line("ERROR", error))
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                return False
            return await self._respond_status(writer, failure.code, failure.reason, failure.message)
        if kind in ("create", "replace"):
            return await self._serve_write(writer, kind, route[1], route[2], route[3], request)
        if request.method != "GET":
            return await self._respond_status(
                writer,
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
        if kind == "discovery":
            return await self._serve_discovery(writer, route[1])
        if kind == "proxy" and isinstance(route[1], tuple):
            return await self._serve_pod_proxy(writer, route[1][1], route[1][2], route[2])
        if kind == "proxy":
            return await self._serve_proxy(writer, route[1], route[2])
        if kind in ("list", "watch", "get"):
            resource_type, namespace, name = route[1], route[2], route[3]
            if kind == "get":
                return await self._serve_get(writer, resource_type, namespace, name)
            try:
                labels = parse_selector(request.params.get("labelSelector", ""))
                fields = _FieldSelector(request.params.get("fieldSelector", ""))
            except SelectorError as err:
                return await self._respond_status(writer, 400, "BadRequest", str(err))
            if kind == "list":
                return await self._serve_list(
                    writer, resource_type, namespace, request.params, labels, fields
                )
            return await self._serve_watch(
                reader, writer, resource_type, namespace, request.params, labels, fields
            )
        return await self._respond_status(
            writer, 404, "NotFound", "the server could not find the requested resource"
        )

    def _route(self, request: _Request) -> tuple[Any, ...]:
        segments = [unquote(s) for s in request.path.strip("/").split("/") if s]
        if segments in (["api"], ["apis"]):
            return ("discovery", tuple(segments))
        if segments[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segments[2:]
        elif len(segments) >= 2 and segments[0] == "apis":
            if len(segments) == 2:
                return ("discovery", tuple(segments))
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return ("other",)
        if not rest:
            return ("discovery", (segments[0], group, version))
        namespace: str | None = None
        with self._lock:
            types = dict(self._types)
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and (found := types.get((group, version, rest[2]))) is not None
            and found.namespaced
        ):
            namespace, rest = rest[1], rest[2:]
        resource_type = types.get((group, version, rest[0]))
        if resource_type is None:
            return ("other",)
        if len(rest) >= 3 and group == "" and rest[0] == "nodes" and rest[2] == "proxy":
            return ("proxy", rest[1], "/".join(rest[3:]))
        if len(rest) >= 3 and group == "" and rest[0] == "pods" and rest[2] == "proxy":
            query = "&".join(f"{k}={v}" for k, v in request.params.items())
            path = "/" + "/".join(rest[3:]) + (f"?{query}" if query else "")
            return ("proxy", ("pod", namespace or "default", rest[1]), path)
        if len(rest) == 2:
            return ("get", resource_type, namespace, rest[1])
        if len(rest) == 1:
            watch = request.params.get("watch", "").lower() in ("1", "true")
            return ("watch" if watch else "list", resource_type, namespace, None)
        return ("other",)

    # ------------------------------------------------------------------ internals: handlers

    async def _serve_discovery(self, writer: asyncio.StreamWriter, where: tuple[str, ...]) -> bool:
        with self._lock:
            types = list(self._types.values())
            preferred = dict(self._preferred)
            failures = dict(self._discovery_failures)
        if self.discovery_delay:  # answer from the state read above, later
            await asyncio.sleep(self.discovery_delay)
        if where == ("api",):
            body: Obj = {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{self.host}:{self._port}"}
                ],
            }
            return await self._respond(writer, 200, orjson.dumps(body))
        groups: dict[str, list[str]] = {}
        for t in types:
            if t.group and t.version not in groups.setdefault(t.group, []):
                groups[t.group].append(t.version)

        def group_doc(name: str) -> Obj:
            versions = sorted(groups[name], key=lambda v: v != preferred.get(name))
            pref = preferred.get(name, versions[0])
            return {
                "name": name,
                "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
                "preferredVersion": {"groupVersion": f"{name}/{pref}", "version": pref},
            }

        if where == ("apis",):
            body = {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [group_doc(g) for g in groups],
            }
            return await self._respond(writer, 200, orjson.dumps(body))
        if len(where) == 2:
            if where[1] not in groups:
                return await self._respond_status(
                    writer, 404, "NotFound", "the server could not find the requested resource"
                )
            body = {"kind": "APIGroup", "apiVersion": "v1", **group_doc(where[1])}
            return await self._respond(writer, 200, orjson.dumps(body))
        _, group, version = where
        group_version = f"{group}/{version}" if group else version
        if group_version in failures:
            code, reason, message = failures[group_version]
            return await self._respond_status(writer, code, reason, message)
        served = [t for t in types if t.group == group and t.version == version]
        if not served:
            return await self._respond_status(
                writer, 404, "NotFound", "the server could not find the requested resource"
            )
        resources: list[Obj] = []
        for t in sorted(served, key=lambda t: t.plural):
            entry: Obj = {
                "name": t.plural,
                "singularName": t.kind.lower() if t.singular is None else t.singular,
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": list(t.verbs),
            }
            if t.short_names:
                entry["shortNames"] = list(t.short_names)
            resources.append(entry)
            for sub in t.subresources:
                kind = f"{t.kind}ProxyOptions" if sub == "proxy" else t.kind
                verbs = (
                    ["create", "delete", "get", "patch", "update"]
                    if sub == "proxy"
                    else ["get", "patch", "update"]
                )
                resources.append(
                    {
                        "name": f"{t.plural}/{sub}",
                        "singularName": "",
                        "namespaced": t.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        body = {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }
        return await self._respond(writer, 200, orjson.dumps(body))

    async def _serve_proxy(self, writer: asyncio.StreamWriter, node_name: str, path: str) -> bool:
        with self._lock:
            answer = self._proxy.get((node_name, path))
            node_exists = (("", node_name)) in self._objects.get("nodes", {})
        if answer is None:
            if node_exists:
                return await self._respond_status(
                    writer, 503, "ServiceUnavailable",
                    f"error trying to reach service: dial tcp 10.0.0.1:10250: connect: connection refused ({node_name})",
                )  # fmt: skip
            return await self._respond_status(
                writer, 404, "NotFound", f'nodes "{node_name}" not found'
            )
        if answer.delay:
            await asyncio.sleep(answer.delay)
        return await self._respond(writer, answer.code, answer.body, answer.content_type)

    async def _serve_pod_proxy(
        self, writer: asyncio.StreamWriter, namespace: str, target: str, path: str
    ) -> bool:
        """Forward a GET to the pod, as kube-apiserver's pod proxy does."""
        scheme, name, port = "http", target, "80"
        if target.count(":") == 2:
            scheme, name, port = target.split(":")
        elif ":" in target:
            name, port = target.split(":")
        with self._lock:
            found = self._objects.get("pods", {}).get((namespace, name))
            address = str(((found or {}).get("status") or {}).get("podIP") or "")
        if found is None:
            return await self._respond_status(writer, 404, "NotFound", f'pods "{name}" not found')
        if not address:
            return await self._respond_status(
                writer, 503, "ServiceUnavailable", f"pod {name} has no IP address"
            )
        try:
            context = None
            if scheme == "https":
                import ssl  # noqa: PLC0415 - only for https pods

                context = ssl.create_default_context()
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            reader, upstream = await asyncio.wait_for(
                asyncio.open_connection(address, int(port), ssl=context), 5
            )
            upstream.write(
                f"GET {path} HTTP/1.1\r\nHost: {address}:{port}\r\nConnection: close\r\n"
                "Accept: text/plain\r\n\r\n".encode()
            )
            raw = await asyncio.wait_for(reader.read(-1), 30)
            upstream.close()
        except (OSError, TimeoutError, ValueError) as err:
            return await self._respond_status(
                writer, 503, "ServiceUnavailable",
                f"error trying to reach service: dial tcp {address}:{port}: {err}",
            )  # fmt: skip
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        code = int(lines[0].split()[1])
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        if "chunked" in headers.get("transfer-encoding", ""):
            decoded, rest = b"", body
            while rest:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if not size:
                    break
                decoded, rest = decoded + rest[:size], rest[size + 2 :]
            body = decoded
        content_type = headers.get("content-type", "text/plain")
        return await self._respond(writer, code, body, content_type)

    async def _serve_write(
        self,
        writer: asyncio.StreamWriter,
        kind: str,
        resource_type: ResourceType,
        namespace: str | None,
        name: str | None,
        request: _Request,
    ) -> bool:
        """POST (create) to a collection, PUT (replace) of an object, with upstream's 409s."""
        try:
            obj = orjson.loads(request.body)
            metadata = obj.setdefault("metadata", {})
        except (orjson.JSONDecodeError, AttributeError):
            return await self._respond_status(writer, 400, "BadRequest", "invalid JSON body")
        if resource_type.namespaced:
            metadata["namespace"] = namespace or "default"
        if name is not None:
            metadata["name"] = name
        key = (metadata.get("namespace", "") if resource_type.namespaced else "", metadata["name"])
        with self._lock:
            current = self._objects.get(resource_type.key, {}).get(key)
            if kind == "create" and current is not None:
                return await self._respond_status(
                    writer,
                    409,
                    "AlreadyExists",
                    f'{resource_type.key} "{key[1]}" already exists',
                )
            if kind == "replace" and current is None:
                return await self._respond_status(
                    writer, 404, "NotFound", f'{resource_type.key} "{key[1]}" not found'
                )
            if (
                kind == "replace"
                and current is not None
                and metadata.get("resourceVersion") != current["metadata"].get("resourceVersion")
            ):
                return await self._respond_status(
                    writer,
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource_type.key} "{key[1]}": the '
                    "object has been modified; please apply your changes to the latest version "
                    "and try again",
                )
            metadata.pop("resourceVersion", None)
            stored = self.apply_many(
                resource_type.key, [obj], mode="add" if kind == "create" else "update"
            )[0]
        return await self._respond(writer, 201 if kind == "create" else 200, orjson.dumps(stored))

    async def _serve_get(
        self,
        writer: asyncio.StreamWriter,
        resource_type: ResourceType,
        namespace: str | None,
        name: str,
    ) -> bool:
        with self._lock:
            found = self._objects.get(resource_type.key, {}).get((namespace or "", name))
            body = None if found is None else orjson.dumps(found)
        if body is None:
            return await self._respond_status(
                writer, 404, "NotFound", f'{resource_type.key} "{name}" not found'
            )
        return await self._respond(writer, 200, body)

    async def _serve_list(
        self,
        writer: asyncio.StreamWriter,
        resource_type: ResourceType,
        namespace: str | None,
        params: Mapping[str, str],
        labels: Selector,
        fields: _FieldSelector,
    ) -> bool:
        try:
            limit = int(params.get("limit") or 0)
        except ValueError:
            return await self._respond_status(writer, 400, "BadRequest", "invalid limit")
        token = params.get("continue", "")
        start: Key | None = None
        with self._lock:
            if token:
                decoded = _decode_continue(token)
                if decoded is None:
                    return await self._respond_status(
                        writer, 400, "BadRequest", "continue key is not valid: illegal base64 data"
                    )
                rv, start = decoded
                if rv < self._compacted or rv < self._continue_floor:
                    return await self._respond_status(
                        writer, 410, "Expired", CONTINUE_EXPIRED_MESSAGE
                    )
            elif params.get("resourceVersionMatch") == "Exact":
                rv = int(params.get("resourceVersion") or 0)
                if rv < self._compacted:
                    return await self._respond_status(
                        writer,
                        410,
                        "Expired",
                        f"too old resource version: {rv} ({self._compacted})",
                    )
            else:
                rv = self._rv
            snapshot = self._snapshot(resource_type.key, rv)
        keys, objs = snapshot.keys, snapshot.objs
        lo, hi = 0, len(keys)
        if namespace is not None:
            lo = bisect.bisect_left(keys, (namespace, ""))
            hi = bisect.bisect_left(keys, (namespace + "\x00", ""))
        if start is not None:
            lo = max(lo, bisect.bisect_right(keys, start))
        selective = not labels.is_everything() or bool(fields.terms)
        items: list[Obj] = []
        index = lo
        while index < hi and (not limit or len(items) < limit):
            obj = objs[index]
            index += 1
            if selective and not (
                labels.matches(obj["metadata"].get("labels") or {}) and fields.matches(obj)
            ):
                continue
            items.append(obj)
        metadata: Obj = {"resourceVersion": str(rv)}
        if limit and index < hi:
            metadata["continue"] = _encode_continue(rv, keys[index - 1])
            if not selective:
                metadata["remainingItemCount"] = hi - index
        body = {
            "kind": f"{resource_type.kind}List",
            "apiVersion": resource_type.api_version,
            "metadata": metadata,
            "items": items,
        }
        return await self._respond(writer, 200, orjson.dumps(body))

    @staticmethod
    def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(b"%x\r\n%b\r\n" % (len(data), data))

    async def _serve_watch(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        resource_type: ResourceType,
        namespace: str | None,
        params: Mapping[str, str],
        labels: Selector,
        fields: _FieldSelector,
    ) -> bool:
        """Stream events until timeout, `end_watches`, a drop or the client leaving. The
        connection is closed after every watch (`Connection: close`): the end-of-client
        monitor reads from the socket, so it cannot be reused safely."""
        loop = asyncio.get_running_loop()
        resource = resource_type.key
        try:
            timeout = float(params.get("timeoutSeconds") or self.default_watch_seconds)
            requested = params.get("resourceVersion", "")
            cursor = int(requested) if requested not in ("", "0") else None
        except ValueError:
            return await self._respond_status(
                writer, 400, "BadRequest", "invalid resourceVersion or timeoutSeconds"
            )
        if self.max_watch_seconds is not None:
            timeout = min(timeout, self.max_watch_seconds)
        deadline = loop.time() + timeout
        selective = not labels.is_everything() or bool(fields.terms)

        def matches(obj: Obj | None) -> bool:
            if obj is None:
                return False
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                return False
            return not selective or (
                labels.matches(obj["metadata"].get("labels") or {}) and fields.matches(obj)
            )

        watch = _Watch(resource, namespace, params.get("allowWatchBookmarks") in _TRUE, writer)
        initial: list[Obj] = []
        with self._lock:
            if cursor is None:
                cursor = self._rv
                initial = [o for o in self._snapshot(resource, cursor).objs if matches(o)]
            compacted = self._compacted
            if cursor >= compacted:
                watch.cursor = cursor
                self._watches.add(watch)
        if cursor < compacted:
            message = f"too old resource version: {cursor} ({compacted})"
            if self.watch_gone_as == "http":
                return await self._respond_status(writer, 410, "Expired", message)
            writer.write(self._head(200, _STREAM_HEADERS))
            self._write_chunk(writer, _event_line("ERROR", status(410, "Expired", message)))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return False
        writer.write(self._head(200, _STREAM_HEADERS))
        for obj in initial:
            self._write_chunk(writer, _event_line("ADDED", obj))
        client_gone = asyncio.ensure_future(reader.read(1))
        client_gone.add_done_callback(lambda _: watch.wake.set())
        every = self.bookmark_interval if watch.allow_bookmarks else None
        next_bookmark = None if every is None else loop.time() + every

        def bookmark(rv: int) -> bytes:
            metadata = {"resourceVersion": str(rv), "creationTimestamp": None}
            object_ = {"kind": resource_type.kind, "apiVersion": resource_type.api_version}
            return _event_line("BOOKMARK", {**object_, "metadata": metadata})

        try:
            while True:
                watch.wake.clear()
                if watch.drop or client_gone.done():
                    writer.transport.abort()
                    return False
                with self._lock:
                    pending = self._changes[bisect.bisect_right(self._change_rvs, cursor) :]
                    now_rv = self._rv
                buffer: list[bytes] = []
                size = 0
                filtered = namespace is not None or selective
                for change in pending:
                    if change.resource != resource:
                        continue
                    line = self._filter(change, matches) if filtered else change.line
                    if line is None:
                        continue
                    buffer.append(line)
                    size += len(line)
                    if size >= 1 << 18:
                        self._write_chunk(writer, b"".join(buffer))
                        buffer.clear()
                        size = 0
                        await writer.drain()
                        if watch.drop:
                            writer.transport.abort()
                            return False
                if buffer:
                    self._write_chunk(writer, b"".join(buffer))
                cursor = watch.cursor = now_rv
                now = loop.time()
                due = next_bookmark is not None and now >= next_bookmark
                if watch.allow_bookmarks and (watch.bookmark or due):
                    self._write_chunk(writer, bookmark(cursor))
                    if every is not None:
                        next_bookmark = now + every
                watch.bookmark = False
                if watch.end or now >= deadline:
                    if watch.allow_bookmarks and self.bookmark_before_timeout:
                        self._write_chunk(writer, bookmark(cursor))
                    break
                await writer.drain()
                wait = (
                    deadline - now if next_bookmark is None else min(deadline, next_bookmark) - now
                )
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(wait, 0.0)):
                        await watch.wake.wait()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return False
        finally:
            with self._lock:
                self._watches.discard(watch)
            client_gone.cancel()

    @staticmethod
    def _filter(change: _Change, matches: Callable[[Obj | None], bool]) -> bytes | None:
        """The event a filtered watch sees for a change (upstream's selector transitions)."""
        now, before = matches(change.obj), matches(change.prev)
        if change.type == "ADDED":
            return change.line if now else None
        if change.type == "DELETED":
            return change.line if before else None
        if now and before:
            return change.line
        if now:
            return orjson.dumps({"type": "ADDED", "object": change.obj}) + b"\n"
        if before:
            return orjson.dumps({"type": "DELETED", "object": change.obj}) + b"\n"
        return None
