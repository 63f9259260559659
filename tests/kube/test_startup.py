"""Start-up calls (`kube.startup`) and the one line they fail with (`runtime.startup`)."""

from __future__ import annotations

import logging
import ssl

import pytest

from custom_metrics_server.http_client.http11 import TransportError, TransportTimeout
from custom_metrics_server.kube.client import KubeApiError
from custom_metrics_server.kube.config import Connection
from custom_metrics_server.kube.startup import call_status, startup_call, startup_error
from custom_metrics_server.runtime.startup import (
    StartupError,
    as_startup_error,
    report_startup_failure,
)

CONNECTION = Connection(host="https://10.96.0.1:443", source="kubeconfig /etc/kc")
CALL = "GET https://10.96.0.1:443/api/v1/pods"


def refused() -> KubeApiError:
    error = KubeApiError(0, "", "GET /api/v1/pods: ConnectError(...)", call=CALL)
    cause = TransportError("cannot connect: [Errno 111] Connect call failed")
    cause.__cause__ = ConnectionRefusedError(111, "Connect call failed")
    error.__cause__ = cause
    return error


def silent() -> KubeApiError:
    error = KubeApiError(0, "", "GET /api/v1/pods: ReadTimeout(...)", call=CALL)
    error.__cause__ = TransportTimeout("no answer within 10s")
    return error


def untrusted() -> KubeApiError:
    error = KubeApiError(0, "", "GET /api/v1/pods: ConnectError(...)", call=CALL)
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    verify.verify_message = "unable to get local issuer certificate"
    cause = TransportError("cannot connect: [SSL: CERTIFICATE_VERIFY_FAILED]")
    cause.__cause__ = verify
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    ("error", "status", "transient"),
    [
        pytest.param(KubeApiError(403, "Forbidden", "no"), "403 Forbidden", False, id="403"),
        pytest.param(KubeApiError(401, "", "no"), "401 Unauthorized", False, id="401-no-reason"),
        pytest.param(KubeApiError(503, "ServiceUnavailable", "x"), "503 ServiceUnavailable", True),
        pytest.param(KubeApiError(429, "TooManyRequests", "x"), "429 TooManyRequests", True),
        pytest.param(refused(), "cannot connect (connection refused)", True, id="refused"),
        pytest.param(silent(), "no answer in time (timeout)", True, id="timeout"),
        pytest.param(
            untrusted(),
            "TLS certificate verification failed (unable to get local issuer certificate)",
            False,
            id="tls",
        ),
    ],
)
def test_a_failed_call_says_what_came_back_and_whether_waiting_helps(
    error: KubeApiError, status: str, transient: bool
) -> None:
    assert call_status(error) == (status, transient)


def test_the_line_names_what_the_call_the_status_the_detail_and_the_fix() -> None:
    error = KubeApiError(403, "Forbidden", 'pods is forbidden: User "x"\ncannot list', call=CALL)
    line = startup_error(
        error, what="cannot list pods", connection=CONNECTION, fixes={403: "bind the role"}
    ).line()
    assert line == (
        f'cannot list pods: {CALL} answered 403 Forbidden (pods is forbidden: User "x" cannot '
        "list). Fix: bind the role"
    )


def test_without_a_fix_of_its_own_the_status_gives_one() -> None:
    unreachable = startup_error(refused(), what="cannot list pods", connection=CONNECTION)
    assert unreachable.line() == (
        f"cannot list pods: {CALL} failed: cannot connect (connection refused). Fix: check the "
        "server address https://10.96.0.1:443 in kubeconfig /etc/kc and that the API server "
        "is reachable from here (retried for 15s)"
    )
    tls = startup_error(untrusted(), what="cannot list pods", connection=CONNECTION)
    assert tls.fix == (
        "the API server's certificate does not verify against the certificate authority of "
        "kubeconfig /etc/kc"
    )
    refused_credentials = startup_error(
        KubeApiError(401, "Unauthorized", "Unauthorized", call=CALL),
        what="cannot list pods",
        connection=CONNECTION,
    )
    assert "does not accept the credentials of kubeconfig /etc/kc" in refused_credentials.fix


async def test_failures_that_may_pass_are_retried_until_the_patience_runs_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    attempts = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def call() -> None:
        attempts.append(now[0])
        raise refused()

    with pytest.raises(StartupError) as raised:
        await startup_call(
            call,
            what="cannot list pods",
            connection=CONNECTION,
            patience=15.0,
            sleep=sleep,
            clock=lambda: now[0],
        )
    assert attempts[:4] == [0.0, 0.5, 1.5, 3.5]  # backoff 0.5 s doubling, at most 4 s
    assert attempts[-1] == 15.0
    assert isinstance(raised.value.__cause__, KubeApiError)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line while it waits, not one per attempt
    assert "retrying for up to 15s" in warnings[0].getMessage()


async def test_a_failure_that_stays_fails_at_once_and_a_success_after_retries_returns() -> None:
    calls = 0

    async def forbidden() -> None:
        nonlocal calls
        calls += 1
        raise KubeApiError(403, "Forbidden", "no", call=CALL)

    async def no_sleep(_: float) -> None:
        return None

    with pytest.raises(StartupError):
        await startup_call(forbidden, what="x", connection=CONNECTION, sleep=no_sleep)
    assert calls == 1

    answers = [refused(), KubeApiError(503, "ServiceUnavailable", "x"), "ok"]

    async def flaky() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await startup_call(flaky, what="x", connection=CONNECTION, sleep=no_sleep) == "ok"


def test_the_report_is_one_line_and_the_traceback_only_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("test.startup")
    try:
        raise KubeApiError(403, "Forbidden", "no", call=CALL)
    except KubeApiError as cause:
        error = startup_error(cause, what="cannot list pods", connection=CONNECTION)
        error.__cause__ = cause
    with caplog.at_level(logging.INFO, logger="test.startup"):
        assert report_startup_failure(error, logger) == 3
    (record,) = caplog.records
    assert record.getMessage().startswith("start-up failed: cannot list pods: GET ")
    assert record.exc_info is None
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="test.startup"):
        report_startup_failure(error, logger)
    assert caplog.records[0].exc_info is not None


def test_an_unexpected_error_is_named_and_points_at_the_traceback() -> None:
    wrapped = as_startup_error(RuntimeError("boom\nagain"))
    assert wrapped.line() == (
        "the server could not start: RuntimeError: boom again. Fix: run with -v=3 for the "
        "traceback, and report it: no message describes this case"
    )
    assert isinstance(wrapped.__cause__, RuntimeError)
    assert as_startup_error(wrapped) is wrapped
