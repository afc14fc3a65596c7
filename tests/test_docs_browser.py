"""The documentation site in a real browser, offline: Chromium (driven by Playwright) loads every
chapter page and the pages with equations, figures or diagrams from a local server, with every
request to another host refused, and each page must have its equations typeset by KaTeX, its Mermaid
diagrams drawn, every image loaded and no script error.

The site is built with ``mkdocs build --strict`` into a temporary folder, or read from
``MINITORCH_NLP_SITE_DIR`` when that names an already built site. Chromium is the system's
(``apt-get install chromium``), or the one ``MINITORCH_NLP_CHROMIUM`` names; without it the test
is skipped."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [f"sections/sec{n}/" for n in range(3, 10)]
PAGES = ["", "engine/", "toolkit/", "backends/", "huggingface/", "check/", "project/", *CHAPTERS]


def chromium() -> str | None:
    named = os.environ.get("MINITORCH_NLP_CHROMIUM")
    return named or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def executable():
    """The Chromium to drive; the tests are skipped, with the reason, when there is none."""
    pytest.importorskip("playwright.sync_api", reason="playwright is not installed (docs extra)")
    path = chromium()
    if path is None:
        pytest.skip("no Chromium installed (apt-get install chromium, or MINITORCH_NLP_CHROMIUM)")
    return path


@pytest.fixture(scope="module")
def site(executable, tmp_path_factory):
    built = os.environ.get("MINITORCH_NLP_SITE_DIR")
    if built:
        return Path(built)
    folder = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                    str(folder)], cwd=ROOT, check=True, capture_output=True,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    return folder


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    thread.join()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def browser(executable):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, headless=True)
        yield instance
        instance.close()


def load_offline(browser, url):
    """Open ``url`` with every request to another host refused; (page, refused URLs, errors)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    refused, errors = [], []

    def route(request_route):
        if urlsplit(request_route.request.url).hostname == "127.0.0.1":
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    page.add_init_script(OPEN_SHADOW_ROOTS)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url, wait_until="load")
    page.wait_for_load_state("networkidle")
    return page, refused, errors


def settle(page, condition):
    """Wait up to 15 s for the scripts to finish; the assertions that follow say what did not."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, timeout=15_000)
    except PlaywrightTimeout:
        pass


def settled_results(page, reads=3, pause_ms=400, most=40):
    """The search results' links once the same list has been read ``reads`` times in a row
    ``pause_ms`` apart: the search worker answers each keystroke, so results of a prefix of the
    query can still be on the page when the last key is typed (at most ``most`` reads)."""
    found, same = None, 0
    for _ in range(most):
        now = page.eval_on_selector_all(".md-search-result__item > a",
                                        "links => links.map(link => link.href)")
        same = same + 1 if now == found else 0
        found = now
        if same >= reads - 1:
            break
        page.wait_for_timeout(pause_ms)
    return found


# Material draws each Mermaid diagram into a closed shadow root; opened, the test can read the SVG.
OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (options) {
  return attach.call(this, {...options, mode: "open"});
};
"""
TYPESET = """() => {
  const spans = [...document.querySelectorAll('.arithmatex')];
  return {count: spans.length,
          raw: spans.filter(s => !s.querySelector('.katex')).map(s => s.textContent.slice(0, 80))};
}"""
# Text outside code and outside KaTeX's output that still holds TeX delimiters: maths that
# Markdown passed through untypeset.
STRAY_TEX = r"""() => {
  const walker = document.createTreeWalker(document.querySelector('article'), NodeFilter.SHOW_TEXT);
  const stray = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement.closest('code, pre, .katex, .arithmatex')) continue;
    if (/\$\$|\\\(|\\\[/.test(node.textContent)) stray.push(node.textContent.slice(0, 80));
  }
  return stray;
}"""
IMAGES = """() => [...document.querySelectorAll('article img')]
  .map(img => ({src: img.getAttribute('src'), ok: img.complete && img.naturalWidth > 0}))"""
DIAGRAMS = """() => [...document.querySelectorAll('.mermaid')]
  .map(box => box.shadowRoot && box.shadowRoot.querySelector('svg') ?
              box.shadowRoot.querySelector('svg').textContent : '')"""


@pytest.mark.slow
@pytest.mark.parametrize("path", PAGES, ids=lambda path: path.strip("/") or "home")
def test_page_works_offline(browser, server, path):
    page, refused, errors = load_offline(browser, server + path)
    try:
        settle(page, "() => document.querySelectorAll('.arithmatex').length === "
                     "document.querySelectorAll('.arithmatex .katex').length")
        typeset = page.evaluate(TYPESET)
        assert not typeset["raw"], f"{path}: equations left as raw LaTeX: {typeset['raw'][:3]}"
        if path in CHAPTERS:
            assert typeset["count"] > 0, f"{path}: no equation on a chapter page"
        stray = page.evaluate(STRAY_TEX)
        assert not stray, f"{path}: maths outside the typeset spans: {stray[:3]}"
        images = page.evaluate(IMAGES)
        assert all(image["ok"] for image in images), \
            f"{path}: images that did not load: {[i['src'] for i in images if not i['ok']]}"
        if path == "engine/":
            settle(page, "() => [...document.querySelectorAll('.mermaid')].every("
                         "b => b.shadowRoot && b.shadowRoot.querySelector('svg'))")
            drawn = page.evaluate(DIAGRAMS)
            assert drawn and all("TanhBackward" in text for text in drawn), \
                f"{path}: the engine graph is not drawn: {drawn}"
        if path == "toolkit/":
            assert any("attention_masks/all_masks.png" in image["src"] for image in images)
        assert not errors, f"{path}: script errors: {errors}"
        assert not refused, f"{path}: requests to other hosts: {refused}"
    finally:
        page.close()


@pytest.mark.slow
@pytest.mark.parametrize("query, chapter", [("ELECTRA discriminator", "sections/sec9/"),
                                             ("knowledge distillation", "sections/sec6/")])
def test_search_finds_the_chapter_before_the_source(browser, server, query, chapter):
    page, refused, errors = load_offline(browser, server)
    try:
        page.click("label.md-search__icon, .md-search__input")
        page.wait_for_function("() => !/Initializing/.test(document.querySelector("
                               "'.md-search-result__meta').textContent)", timeout=60_000)
        page.locator(".md-search__input").press_sequentially(query)   # keys, as a reader types
        settle(page, "() => /matching/.test(document.querySelector('.md-search-result__meta')"
                     ".textContent) && document.querySelector('.md-search-result__item a')")
        found = settled_results(page)
        assert found and chapter in found[0], f"searching {query!r}, the results: {found[:3]}"
        assert not errors and not refused
    finally:
        page.close()
