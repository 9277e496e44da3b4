"""Integration fixtures: a throwaway PostgreSQL server started from the installed binaries.

``postgres_url`` (session-scoped) runs ``initdb`` into a temporary directory, starts
``postgres`` on a free loopback port (unix socket inside the same directory), creates a
database and yields its URL; the server is stopped and the directory removed at the end.

Binaries are looked up in ``$HISTCOMPRESS_PG_BINDIR``, ``pg_config --bindir``, then
``/usr/lib/postgresql/*/bin`` (newest first), then ``PATH``. When they are missing the
tests that need the server are skipped with the reason. PostgreSQL refuses to run as
root, so under root the server runs as the ``postgres`` user (or ``nobody``), which is
given ownership of the temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

_DB_NAME = "histcompress_test"
_SUPERUSER = "histcompress"
_START_TIMEOUT = 60.0


@dataclass(frozen=True)
class _RunAs:
    uid: int
    gid: int
    name: str


def _bindir_has_server(path: Path) -> bool:
    return (path / "initdb").is_file() and (path / "postgres").is_file()


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", path.parent.name)) or (0,)


def find_postgres_bindir() -> Path | None:
    """Directory holding ``initdb`` and ``postgres``, or ``None`` when not installed."""
    override = os.environ.get("HISTCOMPRESS_PG_BINDIR")
    if override:
        path = Path(override)
        return path if _bindir_has_server(path) else None
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            ).stdout.strip()
            if out and _bindir_has_server(Path(out)):
                return Path(out)
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version_key, reverse=True)
    for path in candidates:
        if _bindir_has_server(path):
            return path
    initdb = shutil.which("initdb")
    if initdb and _bindir_has_server(Path(initdb).parent):
        return Path(initdb).parent
    return None


def _run_as() -> _RunAs | None:
    """The unprivileged account to run the server under when we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return _RunAs(entry.pw_uid, entry.pw_gid, name)
    pytest.skip("running as root and no 'postgres' or 'nobody' account to run PostgreSQL as")
    return None  # pragma: no cover


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _chown_tree(root: Path, who: _RunAs) -> None:
    os.chown(root, who.uid, who.gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), who.uid, who.gid)


def _subprocess_kwargs(who: _RunAs | None, workdir: Path) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    kwargs: dict[str, object] = {"env": env, "cwd": str(workdir)}
    if who is not None:
        env["HOME"] = str(workdir)
        env["USER"] = env["LOGNAME"] = who.name
        kwargs.update(user=who.uid, group=who.gid, extra_groups=[])
    return kwargs


@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL server."""

    process: subprocess.Popen[bytes]
    workdir: Path
    port: int
    log: Path

    @property
    def admin_url(self) -> str:
        """URL of the maintenance database."""
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str = _DB_NAME) -> str:
        """URL of ``database`` on this server."""
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL if it does not stop in time."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)


def _start_server(bindir: Path) -> PostgresServer:
    import psycopg

    who = _run_as()
    workdir = Path(tempfile.mkdtemp(prefix="histcompress-pg-"))
    data = workdir / "data"
    log = workdir / "server.log"
    if who is not None:
        _chown_tree(workdir, who)
    kwargs = _subprocess_kwargs(who, workdir)
    init = subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ],
        capture_output=True,
        timeout=120,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )
    if init.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        pytest.fail(f"initdb failed: {init.stderr.decode(errors='replace')[-2000:]}")
    last_error = "no attempt"
    for _ in range(5):
        port = _free_port()
        with open(log, "ab") as log_file:
            process = subprocess.Popen(
                [
                    str(bindir / "postgres"),
                    "-D",
                    str(data),
                    "-p",
                    str(port),
                    "-k",
                    str(workdir),
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                **kwargs,  # type: ignore[arg-type]
            )
        if who is not None:
            with contextlib.suppress(OSError):
                os.chown(log, who.uid, who.gid)
        server = PostgresServer(process, workdir, port, log)
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            try:
                with psycopg.connect(server.admin_url, autocommit=True, connect_timeout=2) as conn:
                    conn.execute(f"CREATE DATABASE {_DB_NAME}")
                return server
            except psycopg.OperationalError as exc:
                last_error = str(exc)
                time.sleep(0.1)
        server.stop()
        last_error = log.read_text(errors="replace")[-2000:] or last_error
    shutil.rmtree(workdir, ignore_errors=True)
    pytest.fail(f"PostgreSQL did not start: {last_error}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server for the whole test session (skips when not installed)."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg 3 is not installed (pip install 'langchain-histcompress[postgres]')")
    bindir = find_postgres_bindir()
    if bindir is None:
        pytest.skip(
            "PostgreSQL server binaries (initdb, postgres) not found: install the "
            "postgresql package or set HISTCOMPRESS_PG_BINDIR"
        )
    server = _start_server(bindir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """URL of an empty database on the throwaway server, e.g. for PostgresSaver/Store tests."""
    return postgres_server.url()
