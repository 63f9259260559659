"""The tutorial backend of docs/backends.md, taken from the page itself, so the page cannot
drift from code that runs."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

DOC = Path(__file__).resolve().parents[2] / "docs" / "backends.md"


def tutorial_source() -> str:
    """The Python block after the `<!-- tutorial: jobs_backend.py` marker."""
    text = DOC.read_text()
    found = re.search(r"<!-- tutorial: jobs_backend\.py[^>]*-->\n```python\n(.*?)```", text, re.S)
    assert found, "the tutorial block is missing from docs/backends.md"
    return found.group(1)


def tutorial_files(tutorial: str = "sqlite-tutorial") -> dict[str, str]:
    """Each file of a step-by-step tutorial: the blocks after its `<!-- <tutorial>: <file> -->`
    markers, in page order, joined (a file may be built over several steps)."""
    files: dict[str, list[str]] = {}
    pattern = rf"<!-- {re.escape(tutorial)}: (\S+) -->\n```\w*\n(.*?)```"
    for name, block in re.findall(pattern, DOC.read_text(), re.S):
        files.setdefault(name, []).append(block)
    assert files, f"no {tutorial} blocks in docs/backends.md"
    return {name: "\n".join(blocks) for name, blocks in files.items()}


def write_tutorial(directory: Path) -> Path:
    """`jobs_backend.py` in `directory` (put it on PYTHONPATH to load it as `jobs_backend`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "jobs_backend.py"
    path.write_text(tutorial_source())
    return path


def import_tutorial(directory: Path) -> ModuleType:
    """The tutorial as a module, imported from `directory`."""
    path = write_tutorial(directory)
    spec = importlib.util.spec_from_file_location("jobs_backend", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.pop("jobs_backend", None)
    spec.loader.exec_module(module)
    return module
