"""What `make image` hands the build from the host, without building (tests/deployment/test_image.py runs
the built image): scripts/image/host_pip_config.py turns the host's pip settings into the two
build secrets the Dockerfile mounts while pip runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "image" / "host_pip_config.py"


def run(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    clean.pop("REQUESTS_CA_BUNDLE", None)
    clean.pop("SSL_CERT_FILE", None)
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "out")],
        env={**clean, "HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout.strip(), result.stderr


def test_index_proxy_and_ca_become_secrets_and_local_paths_stay_out(tmp_path: Path) -> None:
    ca = tmp_path / "corporate-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    config = tmp_path / "home" / ".config" / "pip" / "pip.conf"
    config.parent.mkdir(parents=True)
    config.write_text(
        "[global]\nindex-url = https://mirror.example/simple\nconstraint = /etc/c.txt\n"
        "trusted-host = mirror.example\n"
    )
    flags, stderr = run(
        tmp_path,
        {
            "PIP_CERT": str(ca),
            "PIP_PROXY": "http://proxy.example:3128",
            "PIP_FIND_LINKS": "/opt/wheels https://wheels.example/links",
            "PIP_EXTRA_INDEX_URL": "file:///opt/pypi/simple",
        },
    )
    out = tmp_path / "out"
    assert flags.split() == [
        f"--secret=id=pip-ca,src={out / 'ca.crt'}",
        f"--secret=id=pip-conf,src={out / 'pip.conf'}",
    ]
    assert (out / "ca.crt").read_text() == ca.read_text()
    assert (out / "pip.conf").read_text().splitlines() == [
        "[global]",
        "cert = /run/secrets/pip-ca.crt",  # where the Dockerfile mounts the pip-ca secret
        "find-links = https://wheels.example/links",
        "index-url = https://mirror.example/simple",
        "proxy = http://proxy.example:3128",
        "trusted-host = mirror.example",
    ]
    assert "constraint left out" in stderr
    assert "find-links /opt/wheels https://wheels.example/links: local paths left out" in stderr
    assert "extra-index-url file:///opt/pypi/simple: local file: URLs left out" in stderr


def test_the_dockerfile_mounts_the_secrets_where_the_config_names_them() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "--mount=type=secret,id=pip-conf,target=/run/secrets/pip.conf" in dockerfile
    assert "--mount=type=secret,id=pip-ca,target=/run/secrets/pip-ca.crt" in dockerfile
    assert "export PIP_CONFIG_FILE=/run/secrets/pip.conf" in dockerfile
