"""Start-up failures: what the process says when a dependency refuses it, and how it exits.

Operators read the last lines of `kubectl logs`. A start-up failure is therefore one line,
written last, naming what failed, the call that failed (verb and URL), what came back (HTTP
status, or the connection error) and the setting or permission to fix::

    start-up failed: cannot read ConfigMap kube-system/extension-apiserver-authentication:
    GET https://10.96.0.1:443/api/v1/namespaces/kube-system/configmaps/... answered 403
    Forbidden (...). Fix: the service account needs the RoleBinding to ...

(one line in the log). The traceback is logged only at debug verbosity (`-v=3` and more).
Exit status: 2 when the flags or files given cannot work (nothing was tried), 3 when a
dependency was tried at start-up and refused, could not be reached, or the port could not be
bound. This module owns the error type and the one reporting function; the places that know
what failed build the errors (`kube.startup`, `security.options`, `cli`, ...). It must not
know any particular dependency.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = [
    "CONFIGURATION",
    "REFUSED",
    "StartupError",
    "as_startup_error",
    "report_startup_failure",
]

#: Exit status: the flags or the files they name cannot work.
CONFIGURATION: Final = 2
#: Exit status: a dependency refused, could not be reached, or the port could not be bound.
REFUSED: Final = 3


class StartupError(Exception):
    """A start-up dependency failed; `line()` is what the operator reads."""

    def __init__(
        self,
        what: str,
        *,
        call: str = "",
        status: str = "",
        detail: str = "",
        fix: str = "",
        exit_code: int = REFUSED,
        answered: bool | None = None,
    ) -> None:
        super().__init__(what)
        #: what could not be done: "cannot read ConfigMap kube-system/..."
        self.what = what
        #: the call that failed: "GET https://host/api/v1/..." ("" when no call was made)
        self.call = call
        #: what came back: "403 Forbidden", "connection refused", "No such file or directory"
        self.status = status
        #: the other side's own words (a Status message), when they add something
        self.detail = detail
        #: the setting or permission to change
        self.fix = fix
        self.exit_code = exit_code
        #: whether `status` is the other side's answer (an HTTP status: "answered 403
        #: Forbidden") rather than a failure to get one ("failed: cannot connect ...")
        self.answered = status[:3].isdigit() if answered is None else answered

    def line(self) -> str:
        """The one line: what, call, status (detail), fix."""
        text = self.what
        if self.call and self.status:
            outcome = "answered" if self.answered else "failed:"
            text += f": {self.call} {outcome} {self.status}"
        elif self.call:
            text += f": {self.call} failed"
        elif self.status:
            text += f": {self.status}"
        if self.detail and self.detail not in text:
            text += f" ({self.detail})"
        if self.fix:
            text += f". Fix: {self.fix}"
        return " ".join(text.split())  # one line, whatever the parts held

    def __str__(self) -> str:
        return self.line()


def as_startup_error(error: BaseException) -> StartupError:
    """`error` itself if it is a `StartupError`, else one that names it (the original is the
    cause: its traceback is what `-v=3` shows)."""
    if isinstance(error, StartupError):
        return error
    wrapped = StartupError(
        "the server could not start",
        status=f"{type(error).__name__}: {' '.join(str(error).split())}",
        fix="run with -v=3 for the traceback, and report it: no message describes this case",
    )
    wrapped.__cause__ = error
    return wrapped


def report_startup_failure(error: BaseException, logger: logging.Logger | None = None) -> int:
    """Log `error` as the one start-up failure line (the traceback only when DEBUG is on) and
    return the exit status. An error that is not a `StartupError` is a bug or a case nobody
    described yet: its type and message are the line, with a pointer to `-v=3`."""
    log = logger or logging.getLogger("custom_metrics_server")
    debug = log.isEnabledFor(logging.DEBUG)
    if isinstance(error, StartupError):
        # The whole chain: the cause's traceback is what explains an unexpected failure.
        log.error("start-up failed: %s", error.line(), exc_info=error if debug else None)
        return error.exit_code
    message = " ".join(str(error).split()) or type(error).__name__
    hint = "" if debug else " (run with -v=3 for the traceback)"
    log.error(
        "start-up failed: %s: %s%s",
        type(error).__name__,
        message,
        hint,
        exc_info=error if debug else None,
    )
    return REFUSED
