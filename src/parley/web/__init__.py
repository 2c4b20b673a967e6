"""The browser UI's built bundle, served by ``parley serve`` (``api/webui.py``).

``static/`` holds what the front-end build writes (``index.html`` and ``assets/``, file
names carrying a hash of their content); its source is the repository's top-level
``web/`` folder. Nothing here is Python but this file: the bundle ships as package data,
so a user's machine needs no Node.js.
"""

from __future__ import annotations

from pathlib import Path

STATIC_DIR = Path(__file__).parent / "static"
"""Where the installed bundle is (``web.static_dir`` points elsewhere)."""
