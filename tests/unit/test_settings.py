"""Settings: YAML file, environment overrides, well-known provider variables, validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from parley.settings import Settings, load_settings

EXAMPLE = Path(__file__).parents[2] / "examples" / "parley.yaml"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [
        "PARLEY_CONFIG",
        "PARLEY_DATA_DIR",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ]:
        monkeypatch.delenv(name, raising=False)


def test_defaults_use_the_local_model() -> None:
    settings = load_settings()
    assert [(p.name, p.kind) for p in settings.effective_providers()] == [("local", "local")]
    assert settings.database_url.startswith("sqlite:///")
    assert settings.server.port == 8000


def test_example_file_documents_and_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    settings = load_settings(EXAMPLE)
    providers = {p.name: p for p in settings.effective_providers()}
    assert set(providers) == {"openai", "ollama", "claude", "gemini", "local"}
    key = providers["openai"].api_key
    assert key is not None
    assert key.get_secret_value() == "sk-from-env"
    assert settings.models["gpt"].max_tokens == 2048
    assert "sk-from-env" not in repr(settings)


def test_environment_beats_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"server": {"port": 9001}, "chat": {"max_tools": 5}}))
    monkeypatch.setenv("PARLEY_SERVER__PORT", "9002")
    monkeypatch.setenv("PARLEY_DATA_DIR", str(tmp_path / "data"))
    settings = load_settings(config)
    assert settings.server.port == 9002
    assert settings.chat.max_tools == 5
    assert settings.data_dir == tmp_path / "data"


def test_well_known_variables_add_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    providers = load_settings().effective_providers()
    assert [(p.name, p.kind) for p in providers] == [
        ("openai", "openai"),
        ("anthropic", "anthropic"),
    ]
    assert providers[0].base_url == "http://127.0.0.1:11434/v1"
    assert providers[1].base_url == "https://api.anthropic.com"


def test_config_file_via_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("default_model: x\n")
    monkeypatch.setenv("PARLEY_CONFIG", str(config))
    assert load_settings().default_model == "x"


@pytest.mark.parametrize(
    "content",
    [
        {"unknown_key": 1},
        {"server": {"on_disconnect": "explode"}},
        {"providers": [{"name": "a/b", "kind": "openai"}]},
        {"providers": [{"name": "a", "kind": "openai"}, {"name": "a", "kind": "openai"}]},
        {"models": {"m": {"provider": "nowhere", "model": "x"}}},
    ],
)
def test_bad_files_are_rejected(tmp_path: Path, content: dict[str, object]) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump(content))
    with pytest.raises(ValidationError):
        load_settings(config)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "absent.yaml")


def test_example_file_names_every_setting() -> None:
    """examples/parley.yaml documents every key the settings accept."""
    from parley.settings import ModelAlias, ProviderSettings, Settings

    text = EXAMPLE.read_text()
    missing = [f"{name}" for name in Settings.model_fields if name not in text]
    for name, field in Settings.model_fields.items():
        sub = getattr(field.annotation, "model_fields", {})
        missing += [f"{name}.{key}" for key in sub if f"{key}:" not in text]
    for model, prefix in ((ProviderSettings, "providers"), (ModelAlias, "models")):
        missing += [f"{prefix}.{key}" for key in model.model_fields if f"{key}:" not in text]
    assert missing == []


def test_a_gemini_key_in_the_environment_adds_gemini(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    [gemini] = Settings().effective_providers()
    assert (gemini.name, gemini.kind) == ("gemini", "gemini")
    assert gemini.base_url == "https://generativelanguage.googleapis.com"
    assert gemini.api_key is not None
    assert gemini.api_key.get_secret_value() == "g-key"
