"""The benchmark rig: the processes under test, pinned to cores, and what /proc says of them.

The mock upstream and the load generator share one core; each server under test runs
alone on the other (when the machine has two or more). Servers: the floor relay,
Parley (persistence on, SQLite WAL, a fresh data folder) and, when it can be installed
into its own environment, the LiteLLM proxy with one worker.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

LITELLM_CONFIG = {
    "model_list": [
        {
            "model_name": "bench-model",
            "litellm_params": {
                "model": "openai/bench-model",
                "api_base": "os.environ/UPSTREAM_API_BASE",
                "api_key": "sk-mock",
            },
        }
    ],
    "litellm_settings": {
        "telemetry": False,
        "callbacks": [],
        "success_callback": [],
        "failure_callback": [],
        "num_retries": 0,
        "request_timeout": 600,
        "drop_params": True,
        "set_verbose": False,
    },
    "general_settings": {
        "disable_spend_logs": True,
        "disable_error_logs": True,
        "background_health_checks": False,
        "disable_model_info_refresh": True,
    },
}
# Keep LiteLLM off the network (this machine has none): local cost map and friends.
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_MODE": "PRODUCTION",
    "DISABLE_ADMIN_UI": "True",
    "LITELLM_MASTER_KEY": "sk-parley-bench-master-key-0123456789",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def cores() -> tuple[set[int], set[int]]:
    """(cores for servers under test, cores for the mock and the load generator)."""
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        return set(available), set(available)
    return {available[0]}, {available[1]}


@dataclass
class Service:
    name: str
    port: int
    process: subprocess.Popen[bytes] | None
    model: str = "bench-model"
    headers: str = ""
    log: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def cpu_seconds(self) -> float:
        """User + system CPU of the process and its threads, from /proc."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class Rig:
    def __init__(self, workdir: Path | None = None) -> None:
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="parley-bench-"))
        self.server_cores, self.client_cores = cores()
        self.services: dict[str, Service] = {}
        self.warnings: list[str] = []
        raise_fd_limit()
        if len(os.sched_getaffinity(0)) < 2:
            self.warnings.append("one core only: servers and load generator share it")

    def _spawn(self, name: str, command: list[str], env: dict[str, str], core: set[int]) -> Service:
        log = self.workdir / f"{name}.log"

        def prepare_child() -> None:
            os.sched_setaffinity(0, core)
            raise_fd_limit()

        process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=prepare_child,
        )
        return Service(name, 0, process, log=log)

    def _wait(self, service: Service, path: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{service.port}{path}"
        while time.monotonic() < deadline:
            if service.process is not None and service.process.poll() is not None:
                tail = service.log.read_text(errors="replace")[-2000:] if service.log else ""
                raise RuntimeError(f"{service.name} exited:\n{tail}")
            try:
                if httpx.get(url, timeout=2).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{service.name} did not start in {timeout} s")

    def start_mock(self) -> Service:
        port = free_port()
        command = [sys.executable, "-m", "parley.bench.mock", "--port", str(port)]
        service = self._spawn("direct", command, {}, self.client_cores)
        service.port = port
        self._wait(service, "/v1/models")
        self.services["direct"] = service
        return service

    @property
    def upstream(self) -> str:
        return f"http://127.0.0.1:{self.services['direct'].port}"

    def start_floor(self) -> Service:
        port = free_port()
        command = [
            sys.executable,
            "-m",
            "parley.bench.floor",
            "--port",
            str(port),
            "--upstream",
            self.upstream,
        ]
        service = self._spawn("floor", command, {}, self.server_cores)
        service.port = port
        self._wait(service, "/v1/models")
        self.services["floor"] = service
        return service

    def start_parley(
        self,
        name: str = "parley",
        extra: dict[str, object] | None = None,
        *,
        src: Path | None = None,
    ) -> Service:
        """``parley serve`` on a free port with the mock as its provider (``extra``: more
        settings; ``src``: the checkout's ``src`` folder to run, default this one's)."""
        port = free_port()
        data = self.workdir / name
        data.mkdir(exist_ok=True)
        config: dict[str, object] = {
            "providers": [
                {
                    "name": "mock",
                    "kind": "openai",
                    "base_url": f"{self.upstream}/v1",
                    "api_key": "sk-mock",
                    "models": ["bench-model"],
                }
            ],
            "server": {"log_level": "warning"},
            # the defaults: the bench's requests are stateless, which get no title or
            # suggestion calls of the server's own (LiteLLM makes none either)
            **(extra or {}),
        }
        (data / "parley.yaml").write_text(yaml.safe_dump(config))
        command = [
            sys.executable,
            "-m",
            "parley",
            "serve",
            "--port",
            str(port),
            "--config",
            str(data / "parley.yaml"),
        ]
        env = {"PARLEY_DATA_DIR": str(data)}
        if src is not None:
            env["PYTHONPATH"] = str(src)
        service = self._spawn(name, command, env, self.server_cores)
        service.port = port
        self._wait(service, "/health")
        self.services[name] = service
        return service

    def start_litellm(self, venv: Path) -> Service | None:
        """The LiteLLM proxy from its own environment, installing it there if needed."""
        litellm = venv / "bin" / "litellm"
        if not litellm.exists():
            try:
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
                subprocess.run(
                    [str(venv / "bin" / "pip"), "install", "-q", "litellm[proxy]"],
                    check=True,
                    timeout=900,
                )
            except (subprocess.SubprocessError, OSError) as exc:
                self.warnings.append(f"LiteLLM could not be installed ({exc}); peer skipped")
                shutil.rmtree(venv, ignore_errors=True)
                return None
        port = free_port()
        config = self.workdir / "litellm.yaml"
        config.write_text(yaml.safe_dump(LITELLM_CONFIG))
        env = {**LITELLM_ENV, "UPSTREAM_API_BASE": f"{self.upstream}/v1"}
        for key in ("DATABASE_URL", "REDIS_HOST", "REDIS_URL"):
            os.environ.pop(key, None)
        command = [
            str(litellm),
            "--config",
            str(config),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ]
        service = self._spawn("litellm", command, env, self.server_cores)
        service.port = port
        service.headers = f"authorization: Bearer {LITELLM_ENV['LITELLM_MASTER_KEY']}\r\n"
        try:
            self._wait(service, "/health/liveliness", timeout=120)
        except RuntimeError as exc:
            self.warnings.append(f"LiteLLM did not start ({exc}); peer skipped")
            service.stop()
            return None
        self.services["litellm"] = service
        return service

    def litellm_version(self, venv: Path) -> str | None:
        try:
            out = subprocess.run(
                [str(venv / "bin" / "pip"), "show", "litellm"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        except (subprocess.SubprocessError, OSError):
            return None
        for line in out.splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
        return None

    def set_shape(self, chunks: int, interval: float) -> None:
        httpx.post(
            f"{self.upstream}/_mock", json={"chunks": chunks, "interval": interval}, timeout=5
        )

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            service.stop()
