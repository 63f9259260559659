"""The host's pip settings for the image build, as two build secrets (never image layers).

    python3 scripts/image/host_pip_config.py OUT_DIR

Writes OUT_DIR/pip.conf and OUT_DIR/ca.crt when the host has them, and prints the
`--secret` flags that hand them to `buildah bud` / `docker build` (the Dockerfile mounts them
with `RUN --mount=type=secret` while pip runs). Read as pip reads them: the config files
(/etc/xdg/pip/pip.conf, /etc/pip.conf, ~/.pip/pip.conf, ~/.config/pip/pip.conf, $PIP_CONFIG_FILE,
later ones winning) and then the PIP_* environment. Kept: the settings that say how to reach an
index (index-url, extra-index-url, trusted-host, proxy, timeout, retries, no-index, find-links
URLs); the CA bundle (pip's `cert`, else REQUESTS_CA_BUNDLE / SSL_CERT_FILE, else the system's
/etc/ssl/certs/ca-certificates.crt) is copied and named by `cert`. Left out, with a line on
stderr: local paths that do not exist inside the build (constraint files, find-links
directories) and everything else; the image installs from hash-pinned locks, so a constraint
could not change what it installs anyway.
"""

from __future__ import annotations

import configparser
import os
import shutil
import sys
from pathlib import Path

KEYS = (
    "index-url",
    "extra-index-url",
    "trusted-host",
    "proxy",
    "timeout",
    "default-timeout",
    "retries",
    "no-index",
    "find-links",
)
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
#: Where the Dockerfile mounts the CA secret.
CA_TARGET = "/run/secrets/pip-ca.crt"


def config_files() -> list[Path]:
    home = Path.home()
    files = [
        Path("/etc/xdg/pip/pip.conf"),
        Path("/etc/pip.conf"),
        home / ".pip/pip.conf",
        home / ".config/pip/pip.conf",
    ]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return [path for path in files if path.is_file()]


def settings() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in config_files():
        parser = configparser.RawConfigParser()
        parser.read(path)
        for section in ("global", "install"):
            if parser.has_section(section):
                found.update({key.replace("_", "-"): value for key, value in parser.items(section)})
    for name, value in os.environ.items():
        if name.startswith("PIP_"):
            found[name[4:].lower().replace("_", "-")] = value
    return found


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("pip.conf", "ca.crt"):
        (out / stale).unlink(missing_ok=True)
    found = settings()
    kept: dict[str, str] = {}
    for key, value in found.items():
        if key == "find-links":
            links = value.split()
            urls = [link for link in links if "://" in link and not link.startswith("file:")]
            if len(urls) < len(links):
                print(f"host pip config: find-links {value}: local paths left out", file=sys.stderr)
            if urls:
                kept[key] = " ".join(urls)
        elif key in {"index-url", "extra-index-url"}:
            urls = [url for url in value.split() if not url.startswith("file:")]
            if len(urls) < len(value.split()):
                print(f"host pip config: {key} {value}: local file: URLs left out", file=sys.stderr)
            if urls:
                kept[key] = " ".join(urls)
        elif key in KEYS:
            kept[key] = value
        elif key not in {"cert", "disable-pip-version-check", "no-cache-dir"}:
            print(f"host pip config: {key} left out of the image build", file=sys.stderr)
    bundle = next(
        (
            Path(path)
            for path in (
                found.get("cert"),
                os.environ.get("REQUESTS_CA_BUNDLE"),
                os.environ.get("SSL_CERT_FILE"),
                str(SYSTEM_CA),
            )
            if path and Path(path).is_file()
        ),
        None,
    )
    flags = []
    if bundle is not None:
        shutil.copyfile(bundle, out / "ca.crt")
        kept["cert"] = CA_TARGET
        flags.append(f"--secret=id=pip-ca,src={out / 'ca.crt'}")
    if kept:
        lines = ["[global]", *(f"{key} = {value}" for key, value in sorted(kept.items()))]
        (out / "pip.conf").write_text("\n".join(lines) + "\n")
        flags.append(f"--secret=id=pip-conf,src={out / 'pip.conf'}")
    print(" ".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
