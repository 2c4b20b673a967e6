"""A real Parley server for tests, on a loopback port.

By default the app runs in this process, served by uvicorn in a thread exactly as
``parley serve`` configures it (``parley.serving``): a start costs a few hundred
milliseconds, not the three seconds of importing Parley again. ``process=True`` runs
``python -m parley serve`` in a process of its own, for what needs one: signals,
``kill -9``, an environment of its own (``env``), the process's own limits."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from parley.testing.live import SERVING, LiveServer
from tests.support import postgres
from tests.support.databases import copy_migrated_to


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


PROVIDER_ENVIRONMENT = ("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_API_KEY")
"""Variables Parley reads providers from: a server in this process would see them."""


TEST_ENGINE = "TESTS_DATABASE"
"""The variable that puts the servers the tests start on another engine:
``TESTS_DATABASE=postgresql`` gives each one that names no database of its own a fresh
migrated PostgreSQL database (``tests/support/postgres.py``); scripts/test.sh runs the
API tests of what is stored that way too. (Not PARLEY_*: those go to the server.)"""


def on_test_engine(config: dict[str, Any], env: dict[str, str] | None) -> dict[str, Any]:
    """``config``, on the engine ``TESTS_DATABASE`` names when it names no database."""
    if os.environ.get(TEST_ENGINE, "sqlite") == "sqlite":
        return config
    own = "data_dir" in config or (config.get("database") or {}).get("url")
    if own or (env or {}).get("PARLEY_DATABASE__URL"):
        return config
    return {**config, "database": {**config.get("database", {}), "url": postgres.new_database()}}


class ParleyServer:
    def __init__(
        self,
        data_dir: Path,
        config: dict[str, Any],
        env: dict[str, str] | None = None,
        *,
        process: bool = False,
    ):
        self.data_dir = data_dir
        self.own_process = (
            process
            or bool(env)
            or any(key.startswith(("PARLEY_", *PROVIDER_ENVIRONMENT)) for key in os.environ)
        )
        """Whether the server runs as ``parley serve`` in a process of its own."""
        self.port = free_port()
        self.config_path = data_dir / "parley.yaml"
        data_dir.mkdir(parents=True, exist_ok=True)
        # Titles and suggestions are model calls of the server's own after each turn:
        # off unless a test's config turns them on, so that each test's upstream sees
        # only the calls it scripted (tests/api/test_titles.py turns them on).
        chat = {"generate_titles": False, "generate_suggestions": False, **config.get("chat", {})}
        config = on_test_engine(config, env)
        self.database_url: str | None = (config.get("database") or {}).get("url")
        """The server's database when it is not the SQLite file of ``data_dir``."""
        self.config_path.write_text(yaml.safe_dump({**config, "chat": chat}))
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PARLEY_", *PROVIDER_ENVIRONMENT))
        }
        self.env.update({"PARLEY_DATA_DIR": str(data_dir), **(env or {})})
        default_database = (
            "data_dir" not in config
            and not (config.get("database") or {}).get("url")
            and not self.env.get("PARLEY_DATABASE__URL")
        )
        self._database_dir = Path(self.env["PARLEY_DATA_DIR"]) if default_database else None
        """Where the server keeps its SQLite database (None: another database)."""
        self.log_path = data_dir / "server.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._live: LiveServer | None = None
        self._log_handler: logging.Handler | None = None

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The ``parley serve`` process (only with ``process=True``)."""
        if not self.own_process:
            raise AttributeError("this server runs in the test's process: ask process=True")
        assert self._process is not None, "not started"
        return self._process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "parley.db"

    def file_bytes(self, path: Path) -> bytes:
        """A file of the server's, read by another process. Never open its database
        files here while it runs in this process: closing any descriptor of a file
        drops every POSIX lock the process holds on it, SQLite's included, and the
        next process to open the database then resets the WAL under the server's
        readers (they read a stale snapshot)."""
        return subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout

    def client(self, key: str, *, timeout: float = 30) -> httpx.Client:
        """An httpx client for ``/v1`` with ``key`` as the Bearer token."""
        return httpx.Client(
            base_url=f"{self.url}/v1", headers={"authorization": f"Bearer {key}"}, timeout=timeout
        )

    def create_key(self, owner: str, *options: str) -> str:
        """A new API key for ``owner`` (named after it), made with ``parley keys create``
        (``--admin`` among ``options`` for an admin key)."""
        result = self.cli("keys", "create", "--owner", owner, "--name", owner, *options)
        assert result.returncode == 0, result.stderr
        key = result.stdout.split()[0]
        assert key.startswith("sk-parley-")
        return key

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "parley", *args, "--config", str(self.config_path)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def start(self) -> ParleyServer:
        """Serve, once ``/health`` answers. A data dir with no database yet gets a copy
        of the test process's migrated template first (``tests.support.databases``): the
        server's start-up then finds nothing to migrate."""
        if self._database_dir is not None:
            copy_migrated_to(self._database_dir)
        if not self.own_process:
            return self._start_here()
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "parley",
                "serve",
                "--port",
                str(self.port),
                "--config",
                str(self.config_path),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"parley exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"parley did not start:\n{self.log()}")

    def _start_here(self) -> ParleyServer:
        from parley.app import create_app
        from parley.serving import ParleyUvicorn, uvicorn_config
        from parley.settings import load_settings

        settings = load_settings(self.config_path, data_dir=self.data_dir)
        settings.server.host, settings.server.port = "127.0.0.1", self.port
        # as `parley serve` logs (its basicConfig), into this server's log file
        logging.getLogger("parley").setLevel(settings.server.log_level.upper())
        app = create_app(settings)
        server = ParleyUvicorn(uvicorn_config(app, settings, log_config=None))
        live = LiveServer(server=server, start_timeout=30)
        self._log_handler = _capture_log(self.log_path, live)
        try:
            self._live = live.start()
        except BaseException:
            self._stop_log()
            raise
        return self

    def _stop_log(self) -> None:
        handler, self._log_handler = self._log_handler, None
        if handler is not None:
            for logger in (logging.getLogger(), *logging.Logger.manager.loggerDict.values()):
                if isinstance(logger, logging.Logger):
                    logger.removeHandler(handler)
            handler.close()

    def log_with(self, text: str, timeout: float = 10) -> str:
        """The log, once ``text`` is in it (as it is after ``timeout`` otherwise): what a
        request logs is written after its response is sent."""
        deadline = time.monotonic() + timeout
        log = self.log()
        while text not in log and time.monotonic() < deadline:
            time.sleep(0.02)
            log = self.log()
        return log

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Shut down (``sig``: the signal a process of its own is sent); its exit code."""
        if self._live is not None:
            if sig != signal.SIGTERM:
                raise ValueError("a signal needs the server in a process of its own (process=True)")
            self._live.stop()
            self._live = None
            self._stop_log()
            return 0
        process = self.process
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        return process.returncode

    def __enter__(self) -> ParleyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _capture_log(path: Path, server: LiveServer) -> logging.Handler:
    """What ``server`` logs in this process (its thread and its event loop's tasks),
    appended to ``path`` as ``parley serve`` would write it. The handler goes on the root
    logger and on uvicorn's loggers that do not pass their records up (uvicorn's own
    logging configuration, applied by anything else in this process, stops them)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def mine(record: logging.LogRecord) -> bool:
        return SERVING.get() is server

    handler.addFilter(mine)
    for logger in _log_roots():
        logger.addHandler(handler)
    return handler


def _log_roots() -> list[logging.Logger]:
    """The root logger, and each of uvicorn's loggers whose records never reach it."""
    roots = [logging.getLogger()]
    for name in ("uvicorn.access", "uvicorn.error"):
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None and logger.propagate:
            logger = logger.parent
        if logger is not None and logger not in roots:
            roots.append(logger)
    return roots


def api_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The error object of a response that must have ``status``."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error
