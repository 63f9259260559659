"""The docs tell the truth about the code's names.

* Every module, room, class, function and test that docs/architecture.md names resolves in
  this checkout, and every file path and test that README.md and the other docs name exists,
  so a renamed or moved module fails here instead of leaving the map wrong (docs/envelope.md
  and CHANGELOG.md are dated records, their paths those of their day: not checked).
* Every ``docs/x.md, "Title"`` pointer in the package names a heading (or a bold run-in title)
  of that doc; the errors.py tree draws every ``StatusError`` subclass of the package; the
  long-module list of docs/architecture.md is every module over 400 lines, each saying why.

How a backticked span is read (``_check``):

* text with spaces, parentheses, quotes, ``=`` or ``{``, a leading ``/``, ``-`` or ``.`` (URL
  paths, flags, code), anything naming ``k8s.io``, or a bare lowercase word is prose;
* ``tests/x.py::test_y`` (or ``::test_y`` after one, in the same section): the file exists
  and defines ``test_y``;
* a path ending in ``.py``, ``.c`` or ``/``, globs allowed: with a ``/`` it exists under the
  repository or the package; a bare name in a row of the Rooms table exists in that row's
  room; any other bare name exists somewhere in the package, tests/ or benchmarks/;
* a dotted name (``query.routing.Router``, ``api/negotiation.negotiate_discovery``): its first
  part is a top-level module, the file name of a module (``chain`` for ``server/chain.py``)
  or a class of the package; the rest imports, or is an attribute, or (instance attributes,
  ``*`` patterns) is a name assigned in the owner's module;
* a CamelCase or ``_private`` word: a name the package defines.

In code blocks, each name of the tiers' block is a top-level module, and in the diagrams each
dotted name whose first part is a top-level module resolves; other words are prose. What is
not ours is listed (``NOT_CODE``, ``FOREIGN_PREFIXES``: upstream names, wire fields, the
starting design's and the tutorial's files); anything else that does not resolve fails, with
its line.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import importlib
import re
from pathlib import Path
from types import ModuleType

import pytest

import custom_metrics_server
from custom_metrics_server import errors

ROOT = Path(__file__).resolve().parent.parent
PKG = Path(custom_metrics_server.__file__).resolve().parent
DOCS = ROOT / "docs"

#: Names in backticks that are not this package's: upstream Kubernetes and Go identifiers,
#: wire kinds and headers, the starting design's files, the files docs/backends.md's tutorial
#: has its reader write.
NOT_CODE = frozenset(
    {
        "APIGroupDiscoveryList",
        "ConvertGroupVersionIntoToDiscovery",
        "Current",
        "Status",
        "Accept",
        "api.py",
        "error_handlers.py",
        "jobs_backend.py",
        "sqlite_jobs.py",
        "test_sqlite_jobs.py",
    }
)
#: Dotted names whose first part is not ours (Go and Kubernetes packages and API groups, wire
#: fields, the standard library).
FOREIGN_PREFIXES = ("metav1.", "runtime.Unknown", "http.", "gc.", "asyncio.", "describedObject.")

_SPAN = re.compile(r"`([^`\n]+)`")
_PROSE = re.compile(r"[\s(),'\"={}<>!+@#$%^&|;\\]")
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(?:\.[\w*]+)+$")
_IDENT = re.compile(r"^(?:_[\w]+|[A-Z][a-z0-9]+[A-Z][\w]*|[A-Z][a-z0-9]+)$")
_TEST_NODE = re.compile(r"^(?P<file>tests/[\w/.*-]+\.py)?::(?P<name>[A-Za-z_]\w*)")
_CODE_EXTS = (".py", ".c")


@functools.cache
def _modules() -> dict[str, Path]:
    """Dotted module name (under the package) -> file."""
    found = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            found[".".join(parts)] = path
    return found


@functools.cache
def _defined(path: Path) -> frozenset[str]:
    """Every name a module defines: classes, functions, assignments (self.x included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return frozenset(names)


@functools.cache
def _classes() -> dict[str, list[str]]:
    """Class name -> the modules that define it."""
    found: dict[str, list[str]] = {}
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(module)
    return found


def _all_defined() -> frozenset[str]:
    return frozenset().union(*(_defined(path) for path in _modules().values()))


def _top() -> set[str]:
    return {name.split(".")[0] for name in _modules()} | {"__main__"}


def _attribute(owner: object, module: str, name: str) -> bool:
    """``name`` is an attribute of ``owner``, or a name assigned in ``module``'s file."""
    if "*" not in name and hasattr(owner, name):
        return True
    pattern = re.compile(fnmatch.translate(name))
    return any(pattern.match(defined) for defined in _defined(_modules()[module]))


def _resolve_in(module: str, rest: list[str]) -> str | None:
    """None when ``rest`` resolves from ``module`` (importing submodules as needed)."""
    while rest and f"{module}.{rest[0]}" in _modules():
        module = f"{module}.{rest.pop(0)}"
    obj: object = importlib.import_module(f"custom_metrics_server.{module}")
    for name in rest:
        if not _attribute(obj, module, name):
            return f"{name!r} is not in custom_metrics_server.{module}"
        obj = getattr(obj, name, None)
        if isinstance(obj, ModuleType) or obj is None:
            break
    return None


def _dotted(span: str) -> str | None:
    """None when the dotted name resolves (see the module docstring)."""
    first, *rest = span.split(".")
    if first in _top():
        return _resolve_in(first, rest)
    by_file = [m for m in _modules() if m.rsplit(".", 1)[-1] == first]
    if len(by_file) == 1:
        return _resolve_in(by_file[0], rest)
    if first in _classes():
        for module in _classes()[first]:
            owner = getattr(importlib.import_module(f"custom_metrics_server.{module}"), first)
            if all(_attribute(owner, module, name) for name in rest):
                return None
        return f"{'.'.join(rest)!r} is not an attribute of any class {first}"
    if by_file:
        errors = [_resolve_in(module, list(rest)) for module in by_file]
        return None if None in errors else f"{span!r}: not in any of {by_file}"
    return f"{first!r} is neither a module, a module's file name nor a class of the package"


def _path(span: str, room: str | None) -> str | None:
    """None when the path exists (globs: at least one match)."""
    relative = span.rstrip("/")
    if "/" in span.removesuffix("/"):
        if any(any(base.glob(relative)) for base in (ROOT, PKG)):
            return None
    elif room is not None:
        if (
            any(any((base / room).rglob(relative)) for base in (PKG, ROOT))
            or (PKG / relative).is_dir()
        ):
            return None
    elif any(any(base.glob(relative)) for base in (ROOT, PKG)) or any(
        any(base.rglob(relative)) for base in (PKG, ROOT / "tests", ROOT / "benchmarks")
    ):
        return None
    where = f"room {room}/" if room else "the repository or the package"
    return f"no {span} in {where}"


def _check(span: str, room: str | None, last_test_file: str | None) -> str | None:
    """None when the span is prose or resolves; else why it does not."""
    test = _TEST_NODE.match(span)
    if test:
        file = test["file"] or last_test_file
        if file is None:
            return f"{span}: no test file before it on its line"
        path = ROOT / file
        if not path.exists():
            return f"no {file}"
        if test["name"] not in _defined(path):
            return f"{file} does not define {test['name']}"
        return None
    if _PROSE.search(span) or span[0] in "/-." or span in NOT_CODE:
        return None
    if span.startswith(FOREIGN_PREFIXES) or "k8s.io" in span:
        return None
    if span.endswith(_CODE_EXTS) or span.endswith("/"):
        return _path(span, room)
    if "/" in span:
        head, _, tail = span.rpartition("/")
        if head and "." in tail and not head.startswith(".") and (PKG / head).is_dir():
            return _dotted(f"{head.replace('/', '.')}.{tail}")
        return None
    if _DOTTED.match(span):
        return _dotted(span)
    if _IDENT.match(span):
        known = span in _all_defined() or span in _top()
        return None if known else f"{span} is not defined"
    return None


def _room_of(line: str) -> str | None:
    """The room a Rooms table row is about (its first cell's first directory), else None."""
    if not line.startswith("| `"):
        return None
    first_cell = line.split("|")[1]
    room = re.match(r"\s*`([\w/]+)/`", first_cell)
    return room[1] if room else None


def unresolved(doc: Path, *, only_paths: bool = False) -> list[str]:
    """Every backticked reference of ``doc`` that does not resolve, with its line number."""
    failures = []
    fence: str | None = None  # None outside a code block, "tiers" in the tiers' block
    last_test_file = None  # "the same test; `::test_b`" may follow a row naming the file
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        if line.startswith("```"):
            fence = None if fence is not None else "start"
            continue
        if line.startswith("#"):
            last_test_file = None
        if fence == "start":
            fence = "tiers" if line.strip() == "__main__" else "diagram"
        if fence is not None and only_paths:
            continue
        if fence is not None:
            tiers, spans = _fenced(line) if fence == "tiers" else ([], _fenced(line)[1])
            failures += [
                f"{doc.name}:{number}: `{name}`: not a top-level module"
                for name in tiers
                if name not in _top()
            ]
        else:
            spans = _SPAN.findall(line)
        room = _room_of(line)
        for raw in spans:
            span = raw.strip().removesuffix("()")
            if only_paths and not (span.endswith(_CODE_EXTS) or "::" in span):
                continue
            why = _check(span, room, last_test_file)
            if why:
                failures.append(f"{doc.name}:{number}: `{span}`: {why}")
            node = _TEST_NODE.match(span)
            if node and node["file"]:
                last_test_file = node["file"]
    return failures


_TIER = re.compile(r"\s*([\w]+(?:\s*\|\s*[\w]+)*)\s*(?:\(.*\))?\s*")


def _fenced(line: str) -> tuple[list[str], list[str]]:
    """In a code block: (tier names, dotted names). A tier line (``a | b  (remark)``) names
    top-level modules; elsewhere (the request and data-flow diagrams) a dotted name that
    starts with a top-level module is checked, other words are prose."""
    tier = _TIER.fullmatch(line)
    if tier:
        return [name.strip() for name in tier[1].split("|")], []
    words = re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", line)
    return [], [word for word in words if word.split(".")[0] in _top()]


def test_every_name_in_architecture_md_exists() -> None:
    assert unresolved(DOCS / "architecture.md") == []


#: docs/envelope.md is a dated record of measurements: its paths are those of each run's commit.
DATED = frozenset({"envelope.md"})


@pytest.mark.parametrize(
    "doc",
    ["../README.md", *sorted(p.name for p in DOCS.glob("*.md") if p.name not in DATED)],
)
def test_every_file_path_and_test_in_the_docs_exists(doc: str) -> None:
    assert unresolved(DOCS / doc, only_paths=True) == []


def test_the_error_tree_in_errors_py_names_every_status_error() -> None:
    for module in _modules():
        if module != "__main__":
            importlib.import_module(f"custom_metrics_server.{module}")
    found, todo = set(), [errors.StatusError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("custom_metrics_server."):
                found.add(sub.__name__)
                todo.append(sub)
    assert errors.__doc__ is not None
    drawn = set(re.findall(r"[├└]── (\w+)", errors.__doc__))
    assert found == drawn


def test_every_module_over_400_lines_is_listed_and_says_why() -> None:
    text = " ".join((DOCS / "architecture.md").read_text().split())
    sentence = text[text.index("no module is over ~400 lines") :].split(";")[0]
    listed = set(re.findall(r"`([\w/]+\.py)`", sentence))
    long = {
        path.relative_to(PKG).as_posix()
        for path in PKG.rglob("*.py")
        if len(path.read_text().splitlines()) > 400
    }
    assert listed == long
    for name in long:
        docstring = ast.get_docstring(ast.parse((PKG / name).read_text())) or ""
        assert "one piece" in " ".join(docstring.lower().split()), name


_POINTER = re.compile(r'docs/([\w-]+\.md), "([^"]+)"')


def test_every_pointer_into_a_doc_names_one_of_its_headings() -> None:
    """A docstring's or comment's ``docs/x.md, "Title"`` (wrapped over lines or not) starts a
    heading of that doc, or a bold run-in title (``3. **Who checks ...**``), so a renamed
    section leaves no pointer to nowhere."""
    wrong = []
    for path in sorted(PKG.rglob("*.py")):
        lines = (re.sub(r"^\s*#:?", "", line) for line in path.read_text().splitlines())
        for doc, title in _POINTER.findall(" ".join(" ".join(lines).split())):
            text = (DOCS / doc).read_text()
            headings = [
                line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")
            ] + re.findall(r"(?m)^\s*(?:\d+\.|[-*])?\s*\*\*(.+?)\*\*", text)
            if not any(heading.startswith(title) for heading in headings):
                wrong.append(f"{path.relative_to(PKG)}: {doc}, {title!r}")
    assert wrong == []


def test_the_checker_catches_a_renamed_module_a_missing_name_and_a_missing_test(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "| `scraping/` | `kubelet_scraper.py`, `no_such_module.py` | x |\n"
        "`query.routing.Router` `query.routing.NoSuchRouter` `query/nowhere.py` `nowhere/`\n"
        "`tests/test_memos.py::no_such_test` `chain.reject` `NoSuchClass` `serve --demo`\n"
        "```\nquery.engine ─ query.nowhere\n```\n"
    )
    assert [failure.split(": `")[1].split("`")[0] for failure in unresolved(doc)] == [
        "no_such_module.py",
        "query.routing.NoSuchRouter",
        "query/nowhere.py",
        "nowhere/",
        "tests/test_memos.py::no_such_test",
        "NoSuchClass",
        "query.nowhere",
    ]
