"""What becomes of a tool's output before the model sees it: spilled, then capped.

- **Spill** (Rikkahub): text output over ``spill_bytes`` (32 KiB, UTF-8) is saved whole
  to ``tool_outputs/<call id>.txt`` in the conversation's workspace, and the model gets
  a preview of at most ``preview_bytes`` (4 KiB) plus a note saying how big the output
  is and how to read the rest with ``workspace_read``.
- **Cap** (octos): output longer than ``max_output_chars`` (50,000 characters) keeps its
  head (70%) and tail (30%) around a marker line saying how many characters were
  omitted; the result, marker included, is never longer than the cap.

Error outputs are capped but never spilled (an error is read whole or not at all). If
the spill cannot be written, the output is capped instead.

What does not belong here: running tools (the agent loop), the workspace tools that
read spilled files back (``builtins/workspace.py``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

from parley.settings import ToolSettings
from parley.tools.protocol import ToolOutput

log = logging.getLogger(__name__)

SPILL_FOLDER = "tool_outputs"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 96


def cap_output(text: str, max_chars: int = 50_000, head_fraction: float = 0.7) -> str:
    """``text`` unchanged when it fits, else its head and tail around a marker line."""
    if len(text) <= max_chars:
        return text
    omitted = len(text) - max_chars
    for _ in range(4):  # the marker's length depends on the number it shows
        marker = _marker(omitted)
        keep = max_chars - len(marker)
        if keep <= 0:
            return text[:max_chars]
        if len(text) - keep == omitted:
            break
        omitted = len(text) - keep
    head = min(keep, max(0, round(keep * head_fraction)))
    tail = keep - head
    return text[:head] + marker + text[len(text) - tail :]


def _marker(omitted: int) -> str:
    return f"\n[... {omitted} characters omitted ...]\n"


def spill_output(
    text: str,
    *,
    call_id: str,
    workspace: Path,
    spill_bytes: int = 32 * 1024,
    preview_bytes: int = 4 * 1024,
) -> str | None:
    """Save ``text`` when it is over ``spill_bytes``; returns the preview for the model.

    Returns None (nothing written) when the text is small enough. Raises OSError when
    the file cannot be written, ValueError when ``tool_outputs`` leads out of the
    workspace (a symlink).
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= spill_bytes:
        return None
    relative = f"{SPILL_FOLDER}/{safe_file_stem(call_id)}.txt"
    _write_inside(workspace, relative, data)
    preview = data[:preview_bytes].decode("utf-8", errors="ignore")
    shown = len(preview.encode("utf-8"))
    return (
        f"{preview}\n\n"
        f"[Output truncated: above are the first {len(preview)} of {len(text)} characters "
        f"({shown} of {len(data)} bytes). The full output is saved in the workspace as "
        f'"{relative}": read the rest with the workspace_read tool (path "{relative}", '
        f"offset={len(preview)}; offset and limit count characters).]"
    )


def finish_output(
    output: ToolOutput, *, call_id: str, workspace: Path, settings: ToolSettings
) -> ToolOutput:
    """Spill (not for errors), then cap; the same object back when nothing changed."""
    content = output.content
    if not output.is_error:
        try:
            spilled = spill_output(
                content,
                call_id=call_id,
                workspace=workspace,
                spill_bytes=settings.spill_bytes,
                preview_bytes=settings.preview_bytes,
            )
        except (OSError, ValueError) as exc:
            log.warning("tool output of call %s not saved to the workspace: %s", call_id, exc)
            spilled = None
        if spilled is not None:
            content = spilled
    content = cap_output(content, settings.max_output_chars, settings.head_fraction)
    if content is output.content:
        return output
    return ToolOutput(content, is_error=output.is_error)


def safe_file_stem(call_id: str) -> str:
    """A file name stem made from a tool call id: ``[A-Za-z0-9_-]`` only, never empty.

    An id that had to be changed (or shortened) gets a short hash of the original, so
    two different ids never share a file.
    """
    stem = _UNSAFE.sub("_", call_id)[:_MAX_NAME]
    if stem != call_id or not stem:
        digest = hashlib.sha256(call_id.encode("utf-8", errors="replace")).hexdigest()[:12]
        stem = f"{stem}-{digest}" if stem.strip("_") else f"call-{digest}"
    return stem


def _write_inside(workspace: Path, relative: str, data: bytes) -> None:
    """Write ``data`` to ``workspace/relative`` without following links out of it.

    The folder is created, then checked on its real path; the file is written to a new
    temporary file and renamed over the target, so a symlink planted at the target is
    replaced, never followed.
    """
    target = workspace / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    root = workspace.resolve()
    folder = target.parent.resolve()
    if not folder.is_relative_to(root):
        raise ValueError(f"{SPILL_FOLDER} leads out of the workspace")
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".spill-", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, folder / target.name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
