"""Confine a PromQL query to one namespace, as prom-label-proxy does, or say why it cannot be.

A `prometheus` source's query (docs/metric-definitions.md) is parsed with a real PromQL parser
(`promql-parser`, the Rust crate's bindings) and every vector selector, bare or under a matrix
selector, a subquery, a function, a binary operation or an aggregation, with or without `@` and
`offset`, gets the matcher `namespace="<ns>"`. Every series PromQL reads comes through a
selector, so the confined query reads only that namespace's series; what it does with them
afterwards (`label_replace` renaming `namespace`, `or`, `unless`) cannot bring another
namespace's data back.

Refused, with a reason for the definition's status: a query that does not parse; a selector
that already has a matcher on the label other than `="<ns>"` (`=~".*"`, `!="b"`, `="b"`: where
prom-label-proxy silently replaces or drops a conflicting matcher, a definition's author is
told instead); `or` inside a selector's braces (the parser's extension, not Prometheus's); a
node type this module does not know (prom-label-proxy panics on those: a newer parser must be
read before it is trusted).

How the text is made: the parser's own printer (`prettify`) writes every node but the
selectors; each selector is rebuilt by the binding's `str()` from its edited matchers and parsed
again, because the binding cannot otherwise carry an edit back into the tree. That `str()`
writes label values without escaping, so the values are escaped here first, and the rebuilt
selector is checked to equal the one intended (name, matchers, `@`, `offset`). Last, the whole
text is parsed once more and checked: the same nodes in the same order, every selector with
exactly one matcher on the label, `="<ns>"`. A printer's fault is a refusal, never a leak.

The series cap (`Confined.series_refusal`) is the caller's to apply to the answer: a query
may select no more series than the platform allows the namespace.

Cost: O(length x depth^2) per confinement (three parses, three walks, a parse per selector),
the depth bounded by `MAX_OPERATORS`: about 0.15 s of CPU for the worst query let through, well
under a millisecond for real ones (docs/performance.md, "MetricDefinition sources"); done once
per definition generation, nothing per read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import promql_parser as promql

#: The CRD's cap on `spec.source.prometheus.query`, enforced here too for callers that
#: build a spec by other means.
MAX_QUERY_LENGTH: Final = 4096
#: Operators, parentheses and brackets a query may hold. The binding's tree costs about
#: O(n x depth^2) to build, walk and rebuild (each node's Python object holds a copy of its
#: subtree), and a 4,096-character chain of unary minus or `+` is 2,000 levels deep: minutes of
#: CPU. Counted on the text before parsing (strings included, which can only over-count), the
#: count bounds the depth: 64 costs at most about 0.15 s of CPU, 128 already 1.4 s. Real
#: queries hold a dozen or two.
MAX_OPERATORS: Final = 64
_OPERATOR: Final = re.compile(r"[-+*/%^<>(\[]|==|!=|\b(?:and|or|unless|atan2)\b")
#: Series a confined query may answer with when the platform sets no cap.
DEFAULT_MAX_SERIES: Final = 1000

#: A Kubernetes namespace name (a DNS label): anything else is never a label value we confine to.
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_NAME: Final = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

#: The node types confinement knows how to walk; any other is refused (see the docstring).
_KNOWN_NODES: Final = (
    promql.AggregateExpr,
    promql.BinaryExpr,
    promql.Call,
    promql.MatrixSelector,
    promql.NumberLiteral,
    promql.ParenExpr,
    promql.StringLiteral,
    promql.SubqueryExpr,
    promql.UnaryExpr,
    promql.VectorSelector,
)

#: The binding's match operators are not hashable: a list of pairs, not a dict.
_OPS: Final = (
    (promql.MatchOp.Equal, "="),
    (promql.MatchOp.NotEqual, "!="),
    (promql.MatchOp.Re, "=~"),
    (promql.MatchOp.NotRe, "!~"),
)


@dataclass(frozen=True, slots=True)
class Confined:
    """A query that reads only `namespace`'s series, and the cap on the series it may answer."""

    query: str
    namespace: str
    max_series: int

    def series_refusal(self, count: int) -> str | None:
        """Why an answer of `count` series is refused (over the cap), or None. O(1)."""
        if count > self.max_series:
            return (
                f"the query answered {count} series, over the limit of {self.max_series} "
                f"for namespace {self.namespace}"
            )
        return None


@dataclass(frozen=True, slots=True)
class Refused:
    """A query that cannot be confined; `reason` is for the definition's status."""

    reason: str


class _Unconfinable(Exception):
    """Raised inside the walk; becomes a `Refused`."""


def confine(
    query: str,
    namespace: str,
    *,
    label: str = "namespace",
    max_series: int = DEFAULT_MAX_SERIES,
) -> Confined | Refused:
    """`query` with `label="<namespace>"` on every selector, or why it cannot be. See the module
    docstring. O(len(query))."""
    if not _NAMESPACE.fullmatch(namespace) or len(namespace) > 63:
        return Refused(f"{namespace!r} is not a namespace name")
    if not _LABEL_NAME.fullmatch(label):
        return Refused(f"{label!r} is not a label name")
    if len(query) > MAX_QUERY_LENGTH:
        return Refused(f"the query is {len(query)} characters, over {MAX_QUERY_LENGTH}")
    operators = len(_OPERATOR.findall(query))
    if operators > MAX_OPERATORS:
        return Refused(f"the query has {operators} operators and parentheses, over {MAX_OPERATORS}")
    try:
        tree = _parse(query)
        _check_selectors(tree, namespace, label)
        confined = promql.transform(tree, None, lambda node: _rebuilt(node, namespace, label))
        text = confined.prettify()
        _check_confined(text, _shape(tree), namespace, label)
    except _Unconfinable as refusal:
        return Refused(str(refusal))
    return Confined(text, namespace, max_series)


def _parse(query: str) -> promql.Expr:
    try:
        tree: promql.Expr = promql.parse(query)
    except (ValueError, OverflowError) as error:
        raise _Unconfinable(f"the query does not parse: {error}") from None
    except BaseException as error:
        # A Rust panic reaches Python as pyo3's PanicException, a BaseException.
        if type(error).__name__ != "PanicException":
            raise
        raise _Unconfinable(f"the query does not parse: {error}") from None
    return tree


def _selectors(tree: promql.Expr) -> list[promql.VectorSelector]:
    """Every vector selector, those under matrix selectors included; refuses unknown nodes."""
    found: list[promql.VectorSelector] = []

    def visit(node: promql.Expr) -> None:
        if not isinstance(node, _KNOWN_NODES):
            raise _Unconfinable(f"the query has a {type(node).__name__}, which is not confined")
        if isinstance(node, promql.VectorSelector):
            found.append(node)

    promql.walk(tree, visit)
    return found


def _shape(tree: promql.Expr) -> list[str]:
    """The node types in walk order: what the printed text must parse back to."""
    shape: list[str] = []
    promql.walk(tree, lambda node: shape.append(type(node).__name__))
    return shape


def _check_selectors(tree: promql.Expr, namespace: str, label: str) -> None:
    for selector in _selectors(tree):
        if selector.matchers.or_matchers:
            raise _Unconfinable(
                f"{_describe(selector)} uses 'or' between matchers, which Prometheus does not read"
            )
        for matcher in selector.matchers.matchers:
            if matcher.name != label:
                continue
            if matcher.op != promql.MatchOp.Equal or matcher.value != namespace:
                raise _Unconfinable(
                    f"{_describe(selector)} selects {label}{_op(matcher.op)}"
                    f"{_quoted(matcher.value)}: a definition reads only its own namespace "
                    f"({label}={_quoted(namespace)}, which the server adds itself)"
                )


def _rebuilt(node: promql.Expr, namespace: str, label: str) -> promql.Expr | None:
    """A vector selector with exactly one `label` matcher, `="<namespace>"`; other nodes kept."""
    if not isinstance(node, promql.VectorSelector):
        return None
    wanted = [(m.op, m.name, m.value) for m in node.matchers.matchers if m.name != label]
    wanted.append((promql.MatchOp.Equal, label, namespace))
    # The binding's str() writes values as they are: hand it their escaped form.
    node.matchers = promql.Matchers(
        [promql.Matcher(op, name, _escaped(value)) for op, name, value in wanted]
    )
    rebuilt = _parse(str(node))
    if (
        not isinstance(rebuilt, promql.VectorSelector)
        or rebuilt.name != node.name
        or [(m.op, m.name, m.value) for m in rebuilt.matchers.matchers] != wanted
        or rebuilt.offset != node.offset
        or _at(rebuilt) != _at(node)
    ):
        raise _Unconfinable(f"{_describe(node)} could not be rewritten faithfully")
    return rebuilt


def _check_confined(text: str, shape: list[str], namespace: str, label: str) -> None:
    """The text as Prometheus will read it: the same nodes, every selector confined."""
    tree = _parse(text)
    if _shape(tree) != shape:
        raise _Unconfinable("the confined query does not read back as the query")
    for selector in _selectors(tree):
        on_label = [m for m in selector.matchers.matchers if m.name == label]
        if selector.matchers.or_matchers or [(m.op, m.value) for m in on_label] != [
            (promql.MatchOp.Equal, namespace)
        ]:
            raise _Unconfinable(f"{_describe(selector)} was not confined")


def _at(selector: promql.VectorSelector) -> tuple[object, object] | None:
    at = selector.at
    return None if at is None else (at.type, at.at)


def _op(op: promql.MatchOp) -> str:
    return next(text for known, text in _OPS if known == op)


def _describe(selector: promql.VectorSelector) -> str:
    return f"the selector {selector.name or '{...}'}"


def _escaped(value: str) -> str:
    """`value` as the inside of a PromQL double-quoted string (Go's escapes)."""
    out: list[str] = []
    for char in value:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def _quoted(value: str) -> str:
    return '"' + _escaped(value) + '"'
