"""Tool output: capped to head and tail, spilled to the workspace when large."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parley.settings import ToolSettings
from parley.tools.output import cap_output, finish_output, safe_file_stem, spill_output
from parley.tools.protocol import ToolOutput

MARKER = re.compile(r"\n\[\.\.\. (\d+) characters omitted \.\.\.\]\n")


def split(capped: str) -> tuple[str, int, str]:
    match = MARKER.search(capped)
    assert match is not None
    return capped[: match.start()], int(match.group(1)), capped[match.end() :]


# --- cap ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 999, 1000])
def test_short_text_is_unchanged(size: int) -> None:
    text = "x" * size
    assert cap_output(text, max_chars=1000) is text


def test_one_character_over_is_capped() -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(1001))
    capped = cap_output(text, max_chars=1000)
    assert len(capped) == 1000
    head, omitted, tail = split(capped)
    assert len(head) + omitted + len(tail) == 1001
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) == round((len(head) + len(tail)) * 0.7)


def test_head_and_tail_fractions() -> None:
    text = "h" * 70_000 + "t" * 30_000
    capped = cap_output(text)  # 50,000 characters, 70% head
    assert len(capped) == 50_000
    head, omitted, tail = split(capped)
    assert set(head) == {"h"}
    assert set(tail) == {"t"}
    assert omitted == 100_000 - len(head) - len(tail)
    assert abs(len(head) / (len(head) + len(tail)) - 0.7) < 0.001


def test_multibyte_text_counts_characters() -> None:
    text = "日本語😀é" * 5000  # 25,000 characters, far more bytes
    assert cap_output(text, max_chars=25_000) is text
    capped = cap_output(text, max_chars=10_000, head_fraction=0.5)
    assert len(capped) == 10_000
    head, omitted, tail = split(capped)
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + omitted + len(tail) == len(text)
    capped.encode("utf-8")  # whole characters only


@given(
    st.text(min_size=0, max_size=3000),
    st.integers(min_value=1, max_value=2000),
    st.floats(min_value=0.01, max_value=0.99),
)
def test_cap_never_exceeds_the_limit(text: str, max_chars: int, fraction: float) -> None:
    capped = cap_output(text, max_chars=max_chars, head_fraction=fraction)
    assert len(capped) <= max_chars
    if len(text) <= max_chars:
        assert capped == text
    elif MARKER.search(capped):
        head, omitted, tail = split(capped)
        assert len(head) + omitted + len(tail) == len(text)
    else:  # a limit shorter than the marker itself
        assert capped == text[:max_chars]


# --- spill --------------------------------------------------------------------------


def test_small_output_is_not_spilled(tmp_path: Path) -> None:
    text = "é" * 16_384  # exactly 32 KiB in UTF-8
    assert spill_output(text, call_id="call_1", workspace=tmp_path) is None
    assert not (tmp_path / "tool_outputs").exists()


def test_large_output_is_saved_whole_with_a_preview(tmp_path: Path) -> None:
    text = "".join(f"line {i}: données ✓\n" for i in range(5000))
    preview = spill_output(text, call_id="call_abc", workspace=tmp_path / "ws")
    assert preview is not None
    saved = tmp_path / "ws" / "tool_outputs" / "call_abc.txt"
    assert saved.read_text(encoding="utf-8") == text
    shown, note = preview.split("\n\n[Output truncated", 1)
    assert len(shown.encode("utf-8")) <= 4096
    assert text.startswith(shown)
    size = len(text.encode("utf-8"))
    assert f"first {len(shown)} of {len(text)} characters" in note
    assert f"({len(shown.encode('utf-8'))} of {size} bytes)" in note
    assert f'workspace_read tool (path "tool_outputs/call_abc.txt", offset={len(shown)};' in note
    assert [p.name for p in saved.parent.iterdir()] == ["call_abc.txt"]  # no temporary left


def test_preview_is_cut_on_a_character_boundary(tmp_path: Path) -> None:
    text = "😀" * 10_000  # 4 bytes each; 4097 bytes would split one
    preview = spill_output(text, call_id="c", workspace=tmp_path, preview_bytes=4097)
    assert preview is not None
    shown = preview.split("\n\n[Output truncated", 1)[0]
    assert shown == "😀" * 1024


@pytest.mark.parametrize(
    "call_id", ["../../x", "/etc/passwd", "..", ".", "", "a/../../b", "C:\\x", "x\x00y", "ü" * 300]
)
def test_hostile_call_ids_stay_inside_the_folder(tmp_path: Path, call_id: str) -> None:
    workspace = tmp_path / "ws"
    preview = spill_output("y" * 40_000, call_id=call_id, workspace=workspace)
    assert preview is not None
    files = list((workspace / "tool_outputs").iterdir())
    assert len(files) == 1
    assert files[0].parent.resolve() == (workspace / "tool_outputs").resolve()
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,120}\.txt", files[0].name)
    assert files[0].read_text() == "y" * 40_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]


def test_safe_names_are_distinct() -> None:
    ids = ["a/b", "a_b", "a.b", "a b", "call_1", "call-1", "", "..", "."]
    stems = [safe_file_stem(i) for i in ids]
    assert len(set(stems)) == len(ids)
    assert safe_file_stem("call_1") == "call_1"  # ordinary ids are kept as they are


def test_a_symlinked_target_is_replaced_not_followed(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "tool_outputs").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    os.symlink(outside, workspace / "tool_outputs" / "call_1.txt")
    assert spill_output("z" * 40_000, call_id="call_1", workspace=workspace) is not None
    assert outside.read_text() == "precious"
    assert (workspace / "tool_outputs" / "call_1.txt").read_text() == "z" * 40_000


def test_a_symlinked_folder_leading_out_is_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, workspace / "tool_outputs")
    with pytest.raises(ValueError, match="out of the workspace"):
        spill_output("z" * 40_000, call_id="call_1", workspace=workspace)
    assert list(elsewhere.iterdir()) == []


# --- finish -------------------------------------------------------------------------


def test_finish_spills_text_output(tmp_path: Path) -> None:
    output = ToolOutput("w" * 100_000)
    done = finish_output(output, call_id="call_9", workspace=tmp_path, settings=ToolSettings())
    assert not done.is_error
    assert done.content.startswith("w" * 4096 + "\n\n[Output truncated")
    assert (tmp_path / "tool_outputs" / "call_9.txt").read_text() == "w" * 100_000


def test_finish_caps_errors_without_spilling(tmp_path: Path) -> None:
    output = ToolOutput("e" * 60_000, is_error=True)
    done = finish_output(output, call_id="call_9", workspace=tmp_path, settings=ToolSettings())
    assert done.is_error
    assert len(done.content) == 50_000
    assert MARKER.search(done.content)
    assert not (tmp_path / "tool_outputs").exists()


def test_finish_leaves_small_output_alone(tmp_path: Path) -> None:
    output = ToolOutput("fine")
    assert finish_output(output, call_id="c", workspace=tmp_path, settings=ToolSettings()) is output


def test_finish_caps_when_the_spill_cannot_be_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "ws"
    blocker.write_text("a file where the workspace folder should be")
    settings = ToolSettings(spill_bytes=1024, max_output_chars=2000)
    done = finish_output(ToolOutput("q" * 5000), call_id="c", workspace=blocker, settings=settings)
    assert not done.is_error
    assert len(done.content) == 2000
    assert MARKER.search(done.content)
    assert "not saved" in caplog.text


@pytest.mark.anyio
async def test_the_rest_can_be_read_back_with_workspace_read(tmp_path: Path) -> None:
    from parley.settings import Settings
    from parley.tools.builtins.workspace import workspace_read
    from parley.tools.protocol import ToolContext

    text = "".join(f"{i}: ünïcödé ✓ 😀\n" for i in range(4000))
    workspace = tmp_path / "ws"
    preview = spill_output(text, call_id="call_7", workspace=workspace)
    assert preview is not None
    shown, note = preview.split("\n\n[Output truncated", 1)
    offset = int(re.search(r"offset=(\d+)", note).group(1))  # type: ignore[union-attr]
    assert offset == len(shown)
    context = ToolContext(
        owner="o",
        conversation_id="c",
        call_id="call_8",
        workspace=workspace,
        settings=Settings(data_dir=tmp_path).tools,
    )
    output = await workspace_read.run(
        {"path": "tool_outputs/call_7.txt", "offset": offset, "limit": 500}, context
    )
    assert not output.is_error, output.content
    page = output.content.split("\n", 1)[1]
    assert text[offset:].startswith(page.rsplit("\n[", 1)[0])
