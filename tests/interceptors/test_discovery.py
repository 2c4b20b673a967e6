"""Discovery: built-ins from settings, an installed package's entry point, import paths,
and clear errors for what cannot be loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from parley.errors import ConfigurationError
from parley.events import Done, TextDelta
from parley.interceptors.discovery import build_chain, discover
from parley.interceptors.protocol import CallInfo, Interceptor, TurnInfo
from parley.settings import Settings


class Shout(Interceptor):
    """A test interceptor reached by import path."""

    order = 250

    def __init__(self, volume: int = 1) -> None:
        self.volume = volume

    def describe(self) -> dict[str, Any]:
        return {"volume": self.volume}


def not_an_interceptor() -> object:
    return object()


def settings(tmp_path: Path, **interceptors: Any) -> Settings:
    return Settings(data_dir=tmp_path, interceptors=interceptors)  # type: ignore[arg-type]


@pytest.fixture
def on_path(example_package: Path) -> Iterator[Path]:
    sys.path.insert(0, str(example_package))
    try:
        yield example_package
    finally:
        sys.path.remove(str(example_package))
        for name in [m for m in sys.modules if m.startswith("parley_footer")]:
            del sys.modules[name]


def test_defaults_are_the_audit_log_only(tmp_path: Path) -> None:
    found = discover(settings(tmp_path, discover_entry_points=False))
    assert [(f.interceptor.name, f.source) for f in found] == [("audit", "built-in")]


def test_every_builtin_can_be_enabled(tmp_path: Path) -> None:
    words = tmp_path / "words.txt"
    words.write_text("secret\n")
    chain = build_chain(
        settings(
            tmp_path,
            discover_entry_points=False,
            logging={"enabled": True},
            metadata={"enabled": True},
            sensitive={"enabled": True, "word_files": [str(words)]},
            usage_limits={"enabled": True, "default": {"tokens_per_day": 10}},
            hooks=[{"event": "turn_end", "command": ["true"]}],
        )
    )
    assert [(i["name"], i["order"], i["fail_closed"]) for i in chain.describe()] == [
        ("usage_limits", 50, True),
        ("command_hooks", 60, True),
        ("logging", 100, False),
        ("audit", 110, False),
        ("metadata", 200, False),
        ("sensitive_filter", 210, True),
    ]


def test_an_installed_package_is_found_through_its_entry_point(
    tmp_path: Path, on_path: Path
) -> None:
    found = discover(settings(tmp_path))
    footer = next(f for f in found if f.interceptor.name == "footer")
    assert footer.source == "entry point footer (parley-footer 0.1.0)"
    assert footer.interceptor.order == 450
    # and it works: a footer under the finished answer
    call = CallInfo("model", "m", TurnInfo())
    assert footer.interceptor.on_stream_event(Done("end_turn"), call) == [
        TextDelta("\n\n-- Answered through Parley."),
        Done("end_turn"),
    ]
    assert footer.interceptor.on_stream_event(Done("tool_use"), call) is None


def test_settings_configure_or_leave_out_an_entry_point(tmp_path: Path, on_path: Path) -> None:
    configured = discover(
        settings(
            tmp_path,
            chain=[{"use": "footer", "options": {"text": "ACME"}, "order": 420, "name": "acme"}],
        )
    )
    footer = next(f.interceptor for f in configured if f.source.startswith("entry point"))
    assert (footer.name, footer.order, footer.describe()) == ("acme", 420, {"text": "ACME"})
    left_out = discover(settings(tmp_path, chain=[{"use": "footer", "enabled": False}]))
    assert all(not f.source.startswith("entry point") for f in left_out)


def test_with_discovery_off_only_named_entry_points_load(tmp_path: Path, on_path: Path) -> None:
    off = discover(settings(tmp_path, discover_entry_points=False))
    assert all(f.interceptor.name != "footer" for f in off)
    named = discover(settings(tmp_path, discover_entry_points=False, chain=[{"use": "footer"}]))
    assert any(f.interceptor.name == "footer" for f in named)


def test_an_import_path_with_options(tmp_path: Path) -> None:
    found = discover(
        settings(
            tmp_path,
            discover_entry_points=False,
            chain=[
                {
                    "use": "tests.interceptors.test_discovery:Shout",
                    "options": {"volume": 11},
                    "fail_closed": True,
                }
            ],
        )
    )
    shout = found[-1]
    assert shout.source == "config tests.interceptors.test_discovery:Shout"
    assert isinstance(shout.interceptor, Shout)
    assert (shout.interceptor.name, shout.interceptor.volume) == ("Shout", 11)
    assert shout.interceptor.fail_closed is True


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"use": "no_such_module:X"}, "cannot import 'no_such_module'"),
        ({"use": "tests.interceptors.test_discovery:Nope"}, "has no 'Nope'"),
        ({"use": "not-installed"}, "neither an installed entry point"),
        (
            {"use": "tests.interceptors.test_discovery:not_an_interceptor"},
            "not an Interceptor",
        ),
        (
            {"use": "tests.interceptors.test_discovery:Shout", "options": {"loud": True}},
            "bad options",
        ),
    ],
)
def test_what_cannot_be_loaded_is_a_clear_error(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        discover(settings(tmp_path, discover_entry_points=False, chain=[entry]))


def test_a_failing_factory_is_a_clear_error(tmp_path: Path, on_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="failed to start: ValueError: the footer"):
        discover(settings(tmp_path, chain=[{"use": "footer", "options": {"text": " "}}]))


def test_the_cli_shows_the_chain(tmp_path: Path, example_package: Path) -> None:
    config = tmp_path / "parley.yaml"
    config.write_text("interceptors:\n  logging: {enabled: true}\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")},
        "PYTHONPATH": str(example_package),
        "PARLEY_DATA_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-m", "parley", "interceptors", "--json", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = json.loads(result.stdout)
    assert [(i["name"], i["source"]) for i in shown] == [
        ("logging", "built-in"),
        ("audit", "built-in"),
        ("footer", "entry point footer (parley-footer 0.1.0)"),
    ]
    assert shown[0]["hooks"][0] == "before_request"


def test_the_cli_reports_a_bad_chain(tmp_path: Path) -> None:
    config = tmp_path / "parley.yaml"
    config.write_text("interceptors:\n  chain: [{use: 'nowhere:Thing'}]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_")}
    result = subprocess.run(
        [sys.executable, "-m", "parley", "interceptors", "--config", str(config)],
        env={**env, "PARLEY_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "cannot import 'nowhere'" in result.stdout
