"""The version of the backend contract (not of the server): `MAJOR.MINOR`.

A minor version adds (a new optional capability, a new field with a default, a new helper); a
major version breaks (a removed or changed name or signature). 1.1 added `Replicable`; 1.2
made the `Selector` helpers a plugin turns into a query (`equality_terms()`, `requires_exact()`,
`to_label_selector()`, `str()`) and the `Requirement` fields part of the contract. A
plugin states the contract it was written against (`factory(requires="1.0")`); the server
loads it when the majors are equal and the plugin's minor is not newer than the server's.

PURE: no I/O.
"""

from __future__ import annotations

from typing import Final

__all__ = ["VERSION", "__version__", "compatible", "parse_version"]

__version__: Final = "1.2"
VERSION: Final = (1, 2)


def parse_version(text: str) -> tuple[int, int]:
    """`"1.2"` -> (1, 2); a bare major (`"1"`) is minor 0. ValueError on anything else."""
    major, _, minor = text.strip().partition(".")
    if not major.isdigit() or (minor and not minor.isdigit()):
        raise ValueError(f"not a contract version (MAJOR.MINOR): {text!r}")
    return int(major), int(minor or 0)


def compatible(required: str, *, provided: tuple[int, int] = VERSION) -> bool:
    """Whether a plugin written against contract `required` runs on contract `provided`."""
    major, minor = parse_version(required)
    return major == provided[0] and minor <= provided[1]
