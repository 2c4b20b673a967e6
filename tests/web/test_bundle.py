"""The committed bundle (src/parley/web/static) is exactly what web/ builds, the front
end's own tests pass, and the first load stays small and free of inline script.

web/ is copied (without node_modules) to a temporary folder, installed there from its
lockfile (``npm ci``) and built into a folder of the test's: the work tree is never
touched. Without npm these tests skip, saying how to get it.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
STATIC = ROOT / "src" / "parley" / "web" / "static"
FIRST_LOAD_LIMIT = 250 * 1024
"""Bytes of JavaScript, gzipped, that the first page load may fetch."""
REBUILD = "cd web && npm ci && npm run build"

NPM = shutil.which("npm")
pytestmark = pytest.mark.skipif(
    NPM is None,
    reason="npm not found: the bundle tests need Node.js 20 and npm "
    "(Debian: apt-get install nodejs npm)",
)


@dataclass
class Install:
    root: Path
    """The copy of web/, installed with npm ci."""
    out: Path
    """What it builds."""


def npm_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARLEY_", "NODE_OPTIONS"))}
    env.pop("FORCE_COLOR", None)
    env.update(CI="true", NO_COLOR="1", npm_config_update_notifier="false")
    return env


def run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=npm_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def tail(result: subprocess.CompletedProcess[str], lines: int = 40) -> str:
    return "\n".join((result.stdout + "\n" + result.stderr).strip().splitlines()[-lines:])


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    """web/ copied and installed from its lockfile (npm's cache makes it quick)."""
    assert NPM is not None
    root = tmp_path_factory.mktemp("web") / "web"
    shutil.copytree(
        WEB, root, ignore=shutil.ignore_patterns("node_modules", "dist", ".vite", "coverage")
    )
    result = run([NPM, "ci", "--prefer-offline", "--no-audit", "--no-fund"], root)
    assert result.returncode == 0, f"npm ci failed in a copy of web/:\n{tail(result)}"
    return Install(root=root, out=root.parent / "out")


@pytest.fixture(scope="module")
def built(install: Install) -> Path:
    """The bundle as `npm run build` makes it (vite build; the type check is its own test)."""
    result = run(
        ["npx", "--no-install", "vite", "build", "--outDir", str(install.out), "--emptyOutDir"],
        install.root,
    )
    assert result.returncode == 0, f"vite build failed:\n{tail(result)}"
    return install.out


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_the_committed_bundle_is_what_the_source_builds(built: Path) -> None:
    fresh = files_of(built)
    committed = files_of(STATIC)
    assert fresh, "the build wrote nothing"
    missing = sorted(set(fresh) - set(committed))
    extra = sorted(set(committed) - set(fresh))
    changed = sorted(name for name in set(fresh) & set(committed) if fresh[name] != committed[name])
    problems = []
    if missing:
        problems.append(f"not committed (the source builds them): {', '.join(missing)}")
    if extra:
        problems.append(f"committed but no longer built: {', '.join(extra)}")
    if changed:
        problems.append(f"different from what the source builds: {', '.join(changed)}")
    assert not problems, (
        "The committed bundle in src/parley/web/static is stale:\n  "
        + "\n  ".join(problems)
        + f"\nRebuild it with `{REBUILD}` and commit src/parley/web/static."
    )


def test_the_front_end_type_checks(install: Install) -> None:
    result = run(["npx", "--no-install", "tsc", "--noEmit"], install.root)
    assert result.returncode == 0, f"tsc --noEmit (part of npm run build) failed:\n{tail(result)}"


def test_the_front_end_unit_tests_pass(install: Install) -> None:
    result = run(["npx", "--no-install", "vitest", "run"], install.root)
    assert result.returncode == 0, f"the front end's own tests failed (vitest run):\n{tail(result)}"
    summary = result.stdout + result.stderr
    assert re.search(r"Tests\s+\d+ passed", summary), f"vitest ran no test:\n{tail(result)}"


class _Page(HTMLParser):
    """index.html's scripts, preloads and inline code."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.preloads: list[str] = []
        self.inline: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        for name in found:
            if name.startswith("on"):
                self.inline.append(f"<{tag} {name}=...> (an inline event handler)")
        if "style" in found:
            self.inline.append(f"<{tag} style=...> (an inline style)")
        if tag == "script":
            self._in_script = True
            if found.get("src"):
                self.scripts.append(found["src"])
            else:
                self.inline.append("<script> without src (an inline script)")
        if tag == "link" and found.get("rel") == "modulepreload" and found.get("href"):
            self.preloads.append(found["href"])
        if tag == "style":
            self.inline.append("<style> (an inline style sheet)")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline.append(f"<script> with a body: {data.strip()[:60]!r}")


def parse_index() -> _Page:
    page = _Page()
    page.feed((STATIC / "index.html").read_text())
    return page


STATIC_IMPORT = re.compile(
    r"""(?:^|[;}\n])\s*import\s*(?:[\w$*{}\s,]+?\s*from\s*)?["'](\.{1,2}/[^"']+\.js)["']"""
)
EXPORT_FROM = re.compile(
    r"""(?:^|[;}\n])\s*export\s*[\w$*{}\s,]+?\s*from\s*["'](\.{1,2}/[^"']+\.js)["']"""
)


def asset(url: str) -> Path:
    assert url.startswith("/"), f"{url}: index.html names assets from the root"
    path = STATIC / url.lstrip("/")
    assert path.is_file(), f"index.html names {url}, which is not in the bundle"
    return path


def first_load() -> dict[Path, int]:
    """Each JavaScript file the first load fetches (index.html's module script, its
    preloads, and every module they import statically), with its gzipped size."""
    page = parse_index()
    todo = [asset(url) for url in page.scripts + page.preloads]
    sizes: dict[Path, int] = {}
    while todo:
        path = todo.pop()
        if path in sizes:
            continue
        code = path.read_text()
        sizes[path] = len(gzip.compress(code.encode(), compresslevel=6))
        for found in STATIC_IMPORT.findall(code) + EXPORT_FROM.findall(code):
            todo.append((path.parent / found).resolve())
    return sizes


def test_the_first_load_is_at_most_250_kb_of_javascript_gzipped() -> None:
    sizes = first_load()
    assert sizes, "index.html loads no script"
    total = sum(sizes.values())
    listing = "\n".join(
        f"  {path.relative_to(STATIC)}: {size / 1024:.1f} KB" for path, size in sizes.items()
    )
    assert total <= FIRST_LOAD_LIMIT, (
        f"the first load fetches {total / 1024:.1f} KB of JavaScript gzipped "
        f"(at most {FIRST_LOAD_LIMIT // 1024} KB): load heavy parts with import()\n{listing}"
    )


def test_index_html_has_no_inline_script_or_style() -> None:
    page = parse_index()
    assert page.scripts, "index.html loads no script"
    assert not page.inline, "index.html breaks the CSP (script-src 'self'): " + "; ".join(
        page.inline
    )
