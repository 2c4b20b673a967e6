"""Run a real Parley server (``python -m parley serve``) in a subprocess for tests."""

from __future__ import annotations

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ParleyServer:
    def __init__(self, data_dir: Path, config: dict[str, Any], env: dict[str, str] | None = None):
        self.data_dir = data_dir
        self.port = free_port()
        self.config_path = data_dir / "parley.yaml"
        data_dir.mkdir(parents=True, exist_ok=True)
        # Titles and suggestions are model calls of the server's own after each turn:
        # off unless a test's config turns them on, so that each test's upstream sees
        # only the calls it scripted (tests/api/test_titles.py turns them on).
        chat = {"generate_titles": False, "generate_suggestions": False, **config.get("chat", {})}
        self.config_path.write_text(yaml.safe_dump({**config, "chat": chat}))
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PARLEY_", "OPENAI_", "ANTHROPIC_"))
        }
        self.env.update({"PARLEY_DATA_DIR": str(data_dir), **(env or {})})
        self.log_path = data_dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db_path(self) -> Path:
        return self.data_dir / "parley.db"

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
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
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
            if self.process.poll() is not None:
                raise RuntimeError(f"parley exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"parley did not start:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> ParleyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def api_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The error object of a response that must have ``status``."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error
