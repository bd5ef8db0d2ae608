"""The built documentation site in a real browser (issue 13): headless Chromium opens the home
page and an API page over HTTP, the expected headings are there, and screenshots are saved.

Needs the built site (``python -m sphinx -W -b html docs docs/_build/html``) and Chromium
(Debian's ``chromium`` package). Without them the tests skip with the reason, except under
``CI=true``, where ``.ci/run`` builds the site and installs Chromium first, so a skip there
would hide a failure.

Screenshots go to ``BBQLIB_SCREENSHOT_DIR`` when set (``docs/_static/screenshots`` holds the
committed ones), else to the test's temporary folder.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import struct
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import pytest
from paths import ROOT

SITE = Path(os.environ.get("BBQLIB_DOCS_HTML", ROOT / "docs" / "_build" / "html"))
IN_CI = os.environ.get("CI") == "true"
#: The API page the test opens: the reference of the class most users start with.
API_PAGE = "api/generated/bbqlib.FlatIndex.html"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]
WINDOW = (1280, 900)


def _missing(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: .ci/run should have provided it)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    _missing("Chromium not found (apt-get install -y chromium)")


@pytest.fixture(scope="module")
def site_url():
    """Serve the built site on 127.0.0.1 (a free port) for the module's tests."""
    if not (SITE / "index.html").is_file() or not (SITE / API_PAGE).is_file():
        _missing(f"built docs not found at {SITE} (python -m sphinx -W -b html docs {SITE})")
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's signature)
        pass


@pytest.fixture(scope="module")
def screenshot_dir(tmp_path_factory) -> Path:
    target = os.environ.get("BBQLIB_SCREENSHOT_DIR")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run_chromium(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class _Headings(HTMLParser):
    """Text of every h1-h3 and the ids of documented objects (``<dt id=...>``)."""

    def __init__(self):
        super().__init__()
        self.headings: list[tuple[str, str]] = []
        self.ids: set[str] = set()
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2", "h3"):
            self._open, self._text = tag, []
        if tag == "dt":
            self.ids.update(v for k, v in attrs if k == "id" and v)

    def handle_endtag(self, tag):
        if tag == self._open:
            text = " ".join("".join(self._text).replace("#", " ").split())
            self.headings.append((tag, text))
            self._open = None

    def handle_data(self, data):
        if self._open:
            self._text.append(data)


def _open_page(chromium, site_url, page, tmp_path) -> _Headings:
    done = _run_chromium(
        chromium,
        tmp_path / "profile-dom",
        "--virtual-time-budget=5000",
        "--dump-dom",
        f"{site_url}/{page}",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "</html>" in done.stdout, f"no DOM for {page}: {done.stderr[-2000:]}"
    parser = _Headings()
    parser.feed(done.stdout)
    return parser


def _screenshot(chromium, site_url, page, path: Path, tmp_path) -> None:
    done = _run_chromium(
        chromium,
        tmp_path / "profile-shot",
        "--virtual-time-budget=5000",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        f"--screenshot={path}",
        f"{site_url}/{page}",
    )
    assert done.returncode == 0 and path.is_file(), done.stderr[-2000:]
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == WINDOW
    _assert_not_blank(path)


def _assert_not_blank(path: Path) -> None:
    """A rendered page has text: many distinct pixel values, not one flat colour."""
    plt = pytest.importorskip("matplotlib.pyplot", reason="matplotlib reads the PNG")
    pixels = plt.imread(path)[..., :3]
    assert pixels.std() > 0.02, f"{path} looks blank"
    assert len({tuple(p) for p in pixels[::7, ::7].reshape(-1, 3).round(2)}) > 20


def test_home_page(chromium, site_url, screenshot_dir, tmp_path):
    page = _open_page(chromium, site_url, "index.html", tmp_path)
    assert ("h1", "bbqlib") in page.headings, page.headings
    assert any(text == "Where to go next" for _, text in page.headings), page.headings
    _screenshot(chromium, site_url, "index.html", screenshot_dir / "home.png", tmp_path)


def test_api_page(chromium, site_url, screenshot_dir, tmp_path):
    page = _open_page(chromium, site_url, API_PAGE, tmp_path)
    assert ("h1", "bbqlib.FlatIndex") in page.headings, page.headings
    # The class and its methods are documented from the docstrings.
    assert {"bbqlib.FlatIndex", "bbqlib.FlatIndex.add", "bbqlib.FlatIndex.search"} <= page.ids
    _screenshot(chromium, site_url, API_PAGE, screenshot_dir / "api-flatindex.png", tmp_path)


def test_api_index_lists_the_public_modules(chromium, site_url, tmp_path):
    page = _open_page(chromium, site_url, "api/index.html", tmp_path)
    assert ("h1", "API reference") in page.headings, page.headings


def test_site_cites_no_files_outside_the_repository():
    """The pages (docstrings included) cite papers and Lucene classes, not the development
    notes kept beside the repository (``../shared/spec``)."""
    if not (SITE / "index.html").is_file():
        _missing(f"built docs not found at {SITE}")
    offenders = []
    for page in SITE.rglob("*.html"):
        if "_modules" in page.parts:  # highlighted source code, comments included
            continue
        text = page.read_text(encoding="utf-8")
        if "spec §" in text or "shared/spec" in text or "(spec " in text:
            offenders.append(str(page.relative_to(SITE)))
    assert not offenders, offenders
