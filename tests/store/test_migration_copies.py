"""Migrations carry copies of the rules they apply (a migration never changes with the
code): while a copy and the live rule agree, rows a migration labelled and rows the code
labels match. A change of the live rule needs a migration that labels rows again."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from hypothesis import given
from hypothesis import strategies as st

import parley.store.migrations.versions as versions
from parley.knowledge.lexical import script


def migration(name: str) -> ModuleType:
    path = Path(versions.__path__[0]) / name
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHUNK_SCRIPT = migration("0012_chunk_script.py")
TEXT = st.text(
    alphabet=st.sampled_from("ab Zé9-,.\n中文请假政策日本語のテキスト한국어ж"), max_size=60
)


@given(TEXT)
def test_0012_labels_a_chunks_script_as_the_index_does(text: str) -> None:
    assert CHUNK_SCRIPT.script(text) == script(text)
