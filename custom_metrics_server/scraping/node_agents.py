"""Where each node's agent answers, for ``--usage-source=node-agent``: the agent pods, or an
address template for agents that run on the hosts (``--node-agent-address``).

:class:`AgentDirectory` is a :class:`~custom_metrics_server.kube.watcher.WatchSink` for the
agent pods (a list/watch of ``--node-agent-namespace`` with ``--node-agent-selector``) and
maps a node to the address of the agent running on it: ``spec.nodeName`` -> ``status.podIP``
(the node's address for a ``hostNetwork`` DaemonSet). Only running pods with an IP that are
not being deleted count; during a rollout two agents may share a node for a moment, and then
the ready one is taken (the first by name when both or neither are ready).

When the agent a node is scraped at changes (one appears, turns ready, or moves to another
address), ``on_change(node)`` is called, so that the scraper tries that node at once instead
of waiting out the backoff that the node's failed scrapes (no agent yet) earned it.

It keeps two small strings per agent pod; every operation is O(1) except a relist
(O(agents)). It does no I/O itself (the Reflector feeds it) and never logs.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from ipaddress import IPv6Address
from string import Formatter
from typing import Any, Final, NamedTuple
from urllib.parse import urlsplit

from custom_metrics_server.runtime.tls import client_context

__all__ = [
    "ADDRESS_FIELDS",
    "AgentDirectory",
    "agent_tls",
    "check_address_template",
    "template_address",
]

#: The placeholders of ``--node-agent-address``: the node's name and its InternalIP.
ADDRESS_FIELDS: Final = frozenset({"node", "internal_ip"})


def check_address_template(template: str) -> str:
    """``template`` if it is a usable ``--node-agent-address`` (a host name or IP address,
    with ``{node}`` and ``{internal_ip}`` as the only placeholders), else ValueError saying
    why. O(len)."""
    if not template.strip():
        raise ValueError("the node agent address is empty")
    try:
        fields = [name for _, name, _, _ in Formatter().parse(template) if name is not None]
        unknown = [name for name in fields if name not in ADDRESS_FIELDS]
        if unknown:
            raise ValueError(f"only {{node}} and {{internal_ip}} are known, not {{{unknown[0]}}}")
        sample = template.format(node="node-1", internal_ip="10.0.0.1")
    except (ValueError, IndexError, KeyError) as err:
        raise ValueError(f"{template!r} is not a node agent address template: {err}") from err
    if ":" in sample:  # only a (bare) IPv6 address has colons
        try:
            IPv6Address(sample)
            host: str | None = sample
        except ValueError:
            host = None
    else:
        try:
            host = urlsplit(f"https://{sample}:1/").hostname
        except ValueError:
            host = None
    if host is None or host.lower() != sample.lower() or any(c.isspace() for c in sample):
        raise ValueError(
            f"{template!r} is not a host name or IP address (the scheme is https and the port "
            "--node-agent-port; an IPv6 address without brackets), e.g. {internal_ip}"
        )
    return template


def template_address(
    template: str, node_ip: Callable[[str], str | None]
) -> Callable[[str], str | None]:
    """The address of each node's host agent from ``template`` (checked by
    :func:`check_address_template`); None for a node without an InternalIP when the
    template needs it. O(len) a call."""
    needs_ip = "{internal_ip}" in template

    def address(node: str) -> str | None:
        ip = node_ip(node) if needs_ip else ""
        if needs_ip and not ip:
            return None
        return template.format(node=node, internal_ip=ip)

    return address


class _Agent(NamedTuple):
    name: str
    address: str
    ready: bool


def _agent(obj: Mapping[str, Any]) -> tuple[str, _Agent] | None:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    node = spec.get("nodeName") or ""
    address = status.get("podIP") or ""
    if not node or not address or metadata.get("deletionTimestamp"):
        return None
    if status.get("phase") != "Running":
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    return node, _Agent(str(metadata.get("name", "")), str(address), ready)


class AgentDirectory:
    """Node name -> address of its agent, kept in step with the agent pods."""

    def __init__(self, on_change: Callable[[str], None] | None = None) -> None:
        self._by_pod: dict[str, tuple[str, _Agent]] = {}  # pod name -> (node, agent)
        self._by_node: dict[str, dict[str, _Agent]] = {}
        self._listed: set[str] = set()
        self._on_change = on_change

    # -- WatchSink --

    def list_started(self) -> None:
        """A relist begins."""
        self._listed = set()

    def listed(self, obj: dict[str, Any]) -> None:
        """One pod of the list."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        self._listed.add(name)
        self._put(name, obj)

    def list_finished(self) -> None:
        """Forget the agents the list did not name."""
        for gone in [name for name in self._by_pod if name not in self._listed]:
            self._remove(gone)

    def event(self, type: str, obj: dict[str, Any]) -> None:
        """A watch event."""
        name = str((obj.get("metadata") or {}).get("name", ""))
        if type == "DELETED":
            self._remove(name)
        else:
            self._put(name, obj)

    # -- lookups --

    def _best(self, node: str | None) -> _Agent | None:
        agents = self._by_node.get(node) if node else None
        if not agents:
            return None
        return min(agents.values(), key=lambda agent: (not agent.ready, agent.name))

    def address(self, node: str) -> str | None:
        """The address of ``node``'s agent, or None when none runs there. O(agents on it)."""
        best = self._best(node)
        return None if best is None else best.address

    def nodes(self) -> dict[str, str]:
        """Every node with an agent, and its address. O(agents)."""
        return {node: address for node in self._by_node if (address := self.address(node))}

    def _put(self, name: str, obj: Mapping[str, Any]) -> None:
        found = _agent(obj)
        node = found[0] if found else None
        before = self._best(node)
        self._remove(name)
        if found is None or node is None:
            return
        agent = found[1]
        self._by_pod[name] = (node, agent)
        self._by_node.setdefault(node, {})[name] = agent
        after = self._best(node)
        changed = before is None or after is None or before[1:] != after[1:]
        if changed and after is not None and self._on_change is not None:
            self._on_change(node)

    def _remove(self, name: str) -> None:
        previous = self._by_pod.pop(name, None)
        if previous is None:
            return
        node = previous[0]
        agents = self._by_node.get(node, {})
        agents.pop(name, None)
        if not agents:
            self._by_node.pop(node, None)


def agent_tls(*, ca_file: str | None = None, insecure: bool = False) -> ssl.SSLContext:
    """The TLS context for agents: their serving CA (``ca_file``; the system's otherwise), or
    no verification with ``insecure``. The scraper sends agents no credentials with it
    (:class:`~.kubelet_client.KubeletFetcher`'s ``agent_tls``): agents need none, and a
    compromised agent pod must not collect the server's token."""
    return client_context(ca_file, insecure=insecure)
