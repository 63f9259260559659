"""A real PostgreSQL server for the tests: the Debian package's programs, in a temp dir, on a free
loopback port, started and stopped by the tests themselves (no mock, no service manager).

    server = PostgresServer.create()        # initdb + pg_ctl start
    server.stop(); server.start()           # an outage and a recovery, same port and data
    server.close()                          # pg_ctl stop + the temp dir removed

Where the programs come from: `$PG_BINDIR`, else the newest `/usr/lib/postgresql/<v>/bin` (the
Debian package `postgresql`), else `pg_config --bindir`, else `initdb` on PATH. Without them
the tests skip, except under `CI=true`, where they fail (`.ci/run` installs the package).

Running as root (CI and this repository's machines): initdb and postgres refuse root, so both
run as the unprivileged user the Debian package creates, `postgres` (else `nobody`), through
`subprocess`'s own `user=`/`group=` (setuid in the child: no sudo, su or runuser needed). The
temp dir is made under /tmp (world-traversable) and given to that user; the tests, as root,
reach the server over TCP on 127.0.0.1 only (no Unix socket). Not root: everything runs as
the current user.

The server is tuned for tests (no fsync, small buffers) and uses password authentication
(SCRAM) for every TCP connection, so the plugin's `passwordFile` is really used.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

ADMIN = "cms_admin"
HOW = "the Debian package `postgresql` (/usr/lib/postgresql/<v>/bin); .ci/run installs it"


def find_bin_dir() -> Path | None:
    """Where initdb, pg_ctl and postgres are (see the module), or None."""
    given = os.environ.get("PG_BINDIR")
    if given:
        return Path(given) if (Path(given) / "initdb").is_file() else None
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda path: int(path.parent.parent.name) if path.parent.parent.name.isdigit() else 0,
    )
    if versions:
        return versions[-1].parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        found = subprocess.run(
            [pg_config, "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        if found and (Path(found) / "initdb").is_file():
            return Path(found)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def require_bin_dir() -> Path:
    """The programs' directory; skip the test without them (fail it under CI=true)."""
    found = find_bin_dir()
    if found is None:
        message = f"PostgreSQL is not installed ({HOW})"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run this test: {message}")
        pytest.skip(message)
    return found


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged user the server runs as when we are root; None when we are not."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    pytest.fail("running as root, and neither the user postgres nor nobody exists")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    """One PostgreSQL server of the tests (see the module)."""

    bin_dir: Path
    root: Path
    port: int
    admin_password: str
    user: pwd.struct_passwd | None
    running: bool = field(default=False)

    @property
    def data(self) -> Path:
        """The data directory."""
        return self.root / "data"

    @property
    def log(self) -> Path:
        """The server's log."""
        return self.root / "postgres.log"

    @classmethod
    def create(cls) -> PostgresServer:
        """initdb in a new temp dir, then start on a free port."""
        bin_dir = require_bin_dir()
        user = _server_user()
        # /tmp is world-traversable: the server's user must reach its directory.
        root = Path(tempfile.mkdtemp(prefix="cms-pg-", dir="/tmp" if user else None))
        server = cls(bin_dir, root, free_port(), secrets.token_urlsafe(16), user)
        try:
            if user is not None:
                os.chown(root, user.pw_uid, user.pw_gid)
            password_file = root / "admin-password"
            password_file.write_text(server.admin_password + "\n")
            if user is not None:
                os.chown(password_file, user.pw_uid, user.pw_gid)
            password_file.chmod(0o600)
            server._run(
                "initdb",
                "--pgdata",
                str(server.data),
                "--username",
                ADMIN,
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            )
            password_file.unlink()
            with (server.data / "postgresql.conf").open("a") as conf:
                conf.write(
                    "\n# the tests' server\n"
                    "listen_addresses = '127.0.0.1'\n"
                    f"port = {server.port}\n"
                    "unix_socket_directories = ''\n"
                    "fsync = off\n"
                    "synchronous_commit = off\n"
                    "full_page_writes = off\n"
                    "shared_buffers = 16MB\n"
                    "max_connections = 60\n"
                )
            server.start()
        except BaseException:
            server.close()
            raise
        return server

    def _run(self, program: str, *args: str, timeout: float = 60) -> None:
        user = self.user
        result = subprocess.run(
            [str(self.bin_dir / program), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C"},
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )
        if result.returncode != 0:
            log = self.log.read_text()[-3000:] if self.log.is_file() else ""
            raise RuntimeError(
                f"{program} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}\n{log}"
            )

    def start(self) -> None:
        """Start (again): same data, same port; returns once it accepts connections."""
        self._run("pg_ctl", "start", "--pgdata", str(self.data), "--log", str(self.log), "--wait")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """Stop: `fast` ends the sessions (what an outage looks like to a client)."""
        self._run("pg_ctl", "stop", "--pgdata", str(self.data), "--mode", mode, "--wait")
        self.running = False

    @contextlib.contextmanager
    def stopped(self) -> Iterator[None]:
        """Down inside the block, up again after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    def dsn(
        self, *, user: str = ADMIN, password: str | None = None, database: str = "postgres"
    ) -> str:
        """A connection string to this server."""
        return psycopg.conninfo.make_conninfo(
            host="127.0.0.1",
            port=self.port,
            user=user,
            password=password if password is not None else self.admin_password,
            dbname=database,
            connect_timeout=5,
        )

    def connect(
        self, database: str = "postgres", **kwargs: str
    ) -> psycopg.Connection[tuple[object, ...]]:
        """A synchronous autocommit connection (the admin by default)."""
        return psycopg.connect(self.dsn(database=database, **kwargs), autocommit=True)

    def close(self) -> None:
        """Stop (if running) and remove the temp dir."""
        try:
            if self.running or (self.data / "postmaster.pid").exists():
                with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
