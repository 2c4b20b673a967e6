"""Telling HTML by its first bytes takes linear time, whatever the bytes (issue 17).

The sniffers of fetched pages (``web_fetch``) and attached documents read the first KB
of something a stranger wrote. Their pattern once let HTML comments merge, so a page
opening with 30 empty comments took minutes of backtracking, holding the GIL. Each
check runs in a subprocess here: one that backtracked could not be interrupted.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

COMMENTS = "b'<!---->' * 500"
CASES = [
    (f"{COMMENTS} + b'x'", False),
    (f"{COMMENTS} + b'<html><body>hi</body></html>'", True),
    ("b'  <!-- a -- b --> <!DOCTYPE html><html>'", True),
    ("b'<!-- never closed <html>'", False),
]


@pytest.mark.parametrize("module", ["parley.tools.builtins.web", "parley.transforms.documents"])
def test_the_html_sniffer_is_linear(module: str) -> None:
    checks = "\n".join(
        f"assert bool(_HTML_START.match(({data})[:4096])) is {expected}, {data!r}"
        for data, expected in CASES
    )
    code = f"from {module} import _HTML_START\n{checks}\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=20)
