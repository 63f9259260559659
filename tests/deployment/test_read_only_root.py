"""A read-only root filesystem (the image's, `readOnlyRootFilesystem: true`): every path the
server would write ends in a working fallback or one line naming the path and the flag.

tests/deployment/test_image.py runs the image itself on a read-only root; here the same code paths run in
process, with the directory made unwritable by a regular file where a directory must be created
(as root, permissions cannot stage it), and the temporary directory's absence staged with
monkeypatch (a fault the machine cannot stage for one process).
"""

from __future__ import annotations

import argparse
import base64
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trustme
import yaml

from custom_metrics_server import cli
from custom_metrics_server.kube.config import KubeConfigError, load_connection
from custom_metrics_server.runtime.startup import StartupError
from custom_metrics_server.runtime.tls import server_context
from custom_metrics_server.security.options import DEFAULT_CERT_DIR, SecurityConfigError, _serving


def serving_args(cert_dir: Path = DEFAULT_CERT_DIR, workers: int = 1) -> argparse.Namespace:
    return argparse.Namespace(
        cert_dir=cert_dir, workers=workers, tls_cert_file=None, tls_private_key_file=None
    )


@pytest.fixture
def read_only_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory where the default --cert-dir cannot be created."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "apiserver.local.config").write_text("a file where a directory must go\n")
    return tmp_path


def test_the_default_cert_dir_falls_back_to_a_certificate_in_memory(
    read_only_cwd: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        serving = _serving(serving_args(), demo=True)
    assert str(serving.cert_file).startswith("/proc/self/fd/")
    assert str(serving.key_file).startswith("/proc/self/fd/")
    assert b"BEGIN CERTIFICATE" in serving.ca_pem
    server_context(serving.cert_file, serving.key_file)  # the pair loads
    assert not any(read_only_cwd.rglob("apiserver.crt"))
    (record,) = caplog.records
    assert "--cert-dir apiserver.local.config/certificates cannot be written" in record.message
    assert "kept in memory" in record.message


def test_a_chosen_cert_dir_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    chosen = tmp_path / "file" / "certs"
    with pytest.raises(SecurityConfigError) as raised:
        _serving(serving_args(chosen), demo=True)
    assert f"cannot keep a self-signed serving certificate in --cert-dir {chosen}" in str(
        raised.value
    )
    assert "writable --cert-dir" in raised.value.fix


def test_workers_never_get_a_certificate_of_their_own(read_only_cwd: Path) -> None:
    # N processes serve one port: a pair in memory would differ per process.
    with pytest.raises(SecurityConfigError):
        _serving(serving_args(workers=2), demo=True, processes=2)


def test_a_workers_flag_served_from_one_process_keeps_its_certificate_in_memory(
    read_only_cwd: Path,
) -> None:
    # --workers 3 with a backend that is not replicable is served from this one process
    # (workers.plan): what counts is the processes that serve, not the flag.
    serving = _serving(serving_args(workers=3), demo=False, processes=1)
    assert str(serving.cert_file).startswith("/proc/self/fd/")


def test_the_real_process_with_workers_names_the_cert_dir_flag(read_only_cwd: Path) -> None:
    # The demo's backends are replicable, so two workers would run: they need one pair on disk.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "serve",
            "--demo",
            "--workers",
            "2",
            "--secure-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=read_only_cwd,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "--cert-dir apiserver.local.config/certificates" in last, last


def demo_args(tmp_path: Path, write_kubeconfig: Path | None) -> argparse.Namespace:
    return argparse.Namespace(cert_dir=tmp_path / "certs", write_kubeconfig=write_kubeconfig)


def test_a_demo_kubeconfig_that_cannot_be_written_by_default_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "certs").write_text("")
    with caplog.at_level(logging.WARNING):
        assert cli._demo_kubeconfig(demo_args(tmp_path, None)) is None
    assert f"cannot write its kubeconfig to {tmp_path / 'certs' / 'kubeconfig'}" in caplog.text
    assert "give --write-kubeconfig a writable path" in caplog.text


def test_a_chosen_demo_kubeconfig_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    chosen = tmp_path / "file" / "kubeconfig"
    with pytest.raises(StartupError) as raised:
        cli._demo_kubeconfig(demo_args(tmp_path, chosen))
    assert raised.value.what == f"cannot write --write-kubeconfig {chosen}"
    assert raised.value.fix == "give --write-kubeconfig a writable path"


def test_the_real_process_names_the_kubeconfig_flag(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    chosen = tmp_path / "file" / "kubeconfig"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "custom_metrics_server",
            "serve",
            "--demo",
            "--secure-port",
            "0",
            "--cert-dir",
            str(tmp_path / "certs"),
            "--write-kubeconfig",
            str(chosen),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"cannot write --write-kubeconfig {chosen}" in last, last


def kubeconfig(tmp_path: Path, *, inline: bool) -> Path:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    cluster = {"server": "https://127.0.0.1:6443"}
    if inline:
        cluster["certificate-authority-data"] = base64.b64encode(ca.cert_pem.bytes()).decode()
    else:
        cluster["certificate-authority"] = str(tmp_path / "ca.crt")
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


@pytest.fixture
def no_temporary_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> str:
        raise FileNotFoundError(2, "No usable temporary directory found in ['/tmp', '/var/tmp']")

    monkeypatch.setattr(tempfile, "mkdtemp", refuse)


@pytest.mark.usefixtures("no_temporary_directory")
def test_inline_kubeconfig_data_without_a_temporary_directory_is_one_line(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path, inline=True)
    with pytest.raises(KubeConfigError) as raised:
        load_connection(str(path))
    assert raised.value.where == str(path)
    assert "inline certificate or key data must be written to a temporary directory" in (
        raised.value.reason
    )
    assert "set TMPDIR to a writable directory" in raised.value.reason
    assert "\n" not in raised.value.reason


@pytest.mark.usefixtures("no_temporary_directory")
def test_a_kubeconfig_naming_its_files_needs_no_temporary_directory(tmp_path: Path) -> None:
    connection = load_connection(str(kubeconfig(tmp_path, inline=False)))
    assert connection.ca_file == str(tmp_path / "ca.crt")
    assert connection.host == "https://127.0.0.1:6443"
