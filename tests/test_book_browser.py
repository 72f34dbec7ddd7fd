"""The built book (``_build/html``) read in a real headless Chromium, page by page.

A local HTTP server serves ``_build/html`` on 127.0.0.1; Playwright drives the system's
Chromium (Debian's ``chromium`` package) through every page reachable from ``index.html``,
every page of ``_toc.yml`` and every other HTML file of the build. On each page: no console
error, no page error, no failed
request, no request to any host but the local server (the book must work offline); every
internal link resolves (the file exists and its ``#fragment`` is an id on the target page);
every image loads; the math is typeset by MathJax. On each chapter (notebook) page: the
Colab link opens that chapter's Colab edition (``notebooks/``) on the repository and branch of ``pyproject.toml``; the
exercise solutions start collapsed and open on click; every figure has a caption and alt
text, and each figure's image links to its own file (a tap opens it full size). The search page
finds each chapter by a word of it; the Chinese one finds chapters by Chinese words. Every page
of the table of contents, read at a phone's width (390 px), is no wider than the screen and cuts
off no inline formula; on a chapter page the visible buttons open the chapter list and the page's
contents at 390 and 768 px and collapse the sidebar at 1280 px, in both editions; the Chinese
edition's theme strings (buttons, tooltips, the search field) are Chinese. A full-page screenshot of every
page of the table of contents is saved to ``_build/screenshots/<page>.png`` (of its Chinese
edition, the first screen: ``zh__<page>.png``), and the counts of what was checked to
``_build/screenshots/summary.json``.

Needs ``make book`` first and Chromium at ``/usr/bin/chromium`` (``apt-get install chromium``).
Where Playwright, Chromium or the built book is missing the tests skip, or fail when the
environment sets ``ATTNCOURSE_REQUIRE_BROWSER=1`` (as ``.ci/run`` does once Chromium is there).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import shutil
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest
import yaml
from project_tools import ROOT, normalize

SITE = ROOT / "_build" / "html"
CHINESE = "zh/"  # the Chinese edition's folder on the site
SOURCES_NOT_VISITED = f"{CHINESE}_modules/"  # see book(): linked to and checked, not visited
SCREENSHOTS = ROOT / "_build" / "screenshots"
# Each English page's screenshot shows its whole length, for whoever reviews the build; where
# nobody will look at them (.ci/run), its first screen, as for the Chinese pages: a whole
# page's screenshot costs a third of the crawl.
FULL_PAGE_SCREENSHOTS = os.environ.get("ATTNCOURSE_SCREENSHOTS", "full") == "full"
REQUIRED = os.environ.get("ATTNCOURSE_REQUIRE_BROWSER") == "1"

# Headless, and nothing of Chromium's own reaches out: no background services, and every host
# name but the local server's fails to resolve (the test also records every request to another
# host, and fails on it).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
TIMEOUT_MS = 60_000


def _unavailable(reason: str) -> None:
    """Skip, or fail where the environment requires the browser test to run."""
    if REQUIRED:
        pytest.fail(
            f"{reason} (and ATTNCOURSE_REQUIRE_BROWSER=1 requires the browser test)", pytrace=False
        )
    pytest.skip(reason)


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


# -- what the book should contain -----------------------------------------------------------


def toc_files() -> list[str]:
    """Every document of ``_toc.yml`` (root first), as paths without suffix: ``book/intro``, ..."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return files


def chapter_files() -> list[str]:
    """The documents of ``_toc.yml`` that are notebooks: the chapters."""
    return [f for f in toc_files() if (ROOT / f"{f}.ipynb").exists()]


def repository() -> tuple[str, str, str]:
    """``(org, repo, branch)`` of the repository written in ``[project.urls]`` of pyproject.toml."""
    url, branch = normalize.repository()
    org, repo = url.rstrip("/").removeprefix("https://github.com/").split("/")
    return org, repo, branch


def expected_colab_url(doc: str, chinese: bool = False) -> str:
    """The chapter's Colab edition (``notebooks/<name>.ipynb``, the Chinese one in
    ``notebooks/zh/``), which Colab can render, on the branch."""
    org, repo, branch = repository()
    name = doc.rsplit("/", 1)[-1]
    folder = "notebooks/zh" if chinese else "notebooks"
    return (
        f"https://colab.research.google.com/github/{org}/{repo}/blob/{branch}/{folder}/{name}.ipynb"
    )


def solution_count(doc: str) -> int:
    """Solutions written in a notebook: ``solution("...")`` cells and sphinx-exercise solution blocks."""
    nb = json.loads((ROOT / f"{doc}.ipynb").read_text())
    count = 0
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code":
            count += sum(1 for line in source.splitlines() if re.match(r"\s*solution\(", line))
        else:
            count += len(re.findall(r"^(?:```|:::)\{solution(?:-start)?\}", source, flags=re.M))
    return count


# -- serving and visiting -------------------------------------------------------------------


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class LocalServer:
    """``directory`` served on 127.0.0.1 at a free port, from a background thread."""

    def __init__(self, directory: Path):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "LocalServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


# Page-side helpers, put in front of each script below: the main content of a page, and its
# solutions (the <details> that ``solution(...)`` prints, and sphinx-exercise's solution blocks).
HELPERS_JS = r"""
const attr = (selector, name) => { const el = document.querySelector(selector);
  // Bootstrap moves a tooltip's title to data-bs-original-title once it has set the tooltip up
  return el ? el.getAttribute(name) || el.getAttribute(`data-bs-original-${name}`) : null; };
const bookMain = () => document.querySelector("article.bd-article") ||
document.querySelector("article, main") || document.body;
const solutions = () => [...bookMain().querySelectorAll("details, div.solution")].filter((el) =>
  el.tagName !== "DETAILS" ||
  /^\s*solution|的参考答案/i.test((el.querySelector(":scope > summary") || {}).innerText || ""));
const solutionHead = (el) => el.tagName === "DETAILS" ? el.querySelector(":scope > summary") :
el.querySelector(".admonition-title");
// how wide MathJax drew the formula in a math box (null before it is typeset)
const drawnWidth = (box) => { const drawn = box.querySelector("mjx-container > mjx-math") ||
  box.querySelector("mjx-container"); return drawn ? drawn.getBoundingClientRect().width : null; };
"""


def page_js(body: str) -> str:
    """``body`` (a JavaScript function of one argument) with the helpers in scope."""
    return f"(arg) => {{ {HELPERS_JS} return ({body})(arg); }}"


# Collected in the page once it has loaded and MathJax has finished. Links and image sources
# are absolute URLs; ``ids`` are every id and every <a name> of the page (fragment targets).
COLLECT_JS = page_js(r"""
() => {
  const main = bookMain();
  const outsideCode = (node) =>
    !node.parentElement.closest("pre, code, kbd, script, style, mjx-container, .highlight, .math");
  const rawTex = /\\(?:[A-Za-z]+|[()\[\]])|\$\$|\$[^$\s][^$\n]*\$/;
  const residual = (el) => {
    // Text of a math element left outside MathJax's output (an equation number excepted).
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let text = "";
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.parentElement.closest("mjx-container, .eqno, .headerlink")) text += n.textContent;
    }
    return text.trim();
  };
  // The TeX source of each typeset formula, to name it in a report.
  const texOf = new Map();
  try {
    for (const item of MathJax.startup.document.math) texOf.set(item.typesetRoot, item.math);
  } catch (e) { /* no MathJax on the page */ }
  // A backslash MathJax drew as a character (\_ in \text{...}, an unknown escape): the reader sees it.
  const shownBackslash = (c) => c !== null && (c.querySelector("mjx-c.mjx-c5C") !== null
    || [...c.querySelectorAll("mjx-utext")].some((u) => u.textContent.includes("\\")));
  const strays = [];
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (outsideCode(n) && rawTex.test(n.textContent)) strays.push(n.textContent.trim().slice(0, 120));
  }
  return {
    title: document.title,
    ids: [...document.querySelectorAll("[id]")].map((e) => e.id)
      .concat([...document.querySelectorAll("a[name]")].map((e) => e.name)),
    links: [...document.querySelectorAll("a[href]")].map((a) => ({href: a.href, raw: a.getAttribute("href")})),
    images: [...document.images].map((i) => ({src: i.currentSrc || i.src, complete: i.complete,
    width: i.naturalWidth})),
    math: [...document.querySelectorAll(".math")].map((e) => ({
      typeset: e.querySelector("mjx-container") !== null,
      error: e.querySelector("mjx-merror, [data-mjx-error]") !== null,
      residual: residual(e).slice(0, 120),
      backslash: shownBackslash(e.querySelector("mjx-container")),
      tex: (texOf.get(e.querySelector("mjx-container")) || "").slice(0, 120),
    })),
    strayTex: strays,
    mathjax: (window.MathJax && window.MathJax.version) || null,
    scripts: [...document.scripts].map((s) => s.src).filter((src) => src),
    prose: [...main.querySelectorAll("p")].filter((p) => !p.closest(".cell_output, .output, details, pre, nav, footer"))
      .map((p) => p.innerText).join("\n"),
    solutions: solutions().length,
    lang: document.documentElement.lang,
    languageSwitch: (document.querySelector("a.btn-language-switch") || {}).href || null,
    // what the theme writes around the page: the strings a reader of the Chinese edition meets
    frame: {
      primaryToggle: attr(".bd-header-article .primary-toggle", "title"),
      secondaryToggle: attr(".bd-header-article .secondary-toggle", "title"),
      headingLink: attr("article a.headerlink", "title"),
      colab: attr(".dropdown-launch-buttons a[href*='colab']", "title"),
      colorMode: attr(".bd-header-article .theme-switch-button", "aria-label"),
      search: attr("#pst-search-dialog input[name=q]", "placeholder"),
      pdf: attr(".btn-download-pdf-button", "title"),
    },
  };
}
""")

# A page read at a phone's width: how wide it is (``scrollWidth``), and each inline formula whose
# drawing is wider than the box that holds it where that box does not scroll (cut off).
NARROW_WIDTH = 390
NARROW_JS = page_js(r"""
() => {
  const clipped = [];
  for (const box of bookMain().querySelectorAll("span.math")) {
    const width = drawnWidth(box);
    if (width === null || box.getClientRects().length === 0) continue;
    const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    if (width > box.clientWidth + 1 && !scrolls) clipped.push(`${Math.round(width)} px drawn in ` +
      `${box.clientWidth} px: ${box.textContent.trim().slice(0, 60)}`);
  }
  return {width: document.documentElement.scrollWidth, clipped};
}
""")

# A page read in a desktop's window: the code blocks that scroll sideways (a line wider than the
# code column: the chapters' cells are formatted at 80 characters, book/ruff.toml; a listing in
# an exercise's box, or a docstring's example on the API page, has less room), the printed
# outputs that do (book_fixes.py wraps their lines), the tables wider than the text column (the
# theme lets them scroll, and hides the columns past it), and the displayed formulas drawn wider
# than the text column (the reader sees them cut at its edge).
WIDE_WIDTH = 1280
WIDE_CODE_JS = page_js(r"""
() => [
  ...[...document.querySelectorAll("article pre")]
    .filter((pre) => !pre.closest(".cell_output") && pre.getClientRects().length > 0)
    .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
    .map((pre) => `${pre.scrollWidth} px in ${pre.clientWidth} px: ` +
      pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "").slice(0, 90)),
  ...[...document.querySelectorAll(".cell_output .output:is(.stream, .text_plain, .stderr) pre")]
    .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
    .map((pre) => `output ${pre.scrollWidth} px in ${pre.clientWidth} px: ` +
      pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a), "").slice(0, 90)),
  ...[...document.querySelectorAll("article table")]
    .filter((table) => table.scrollWidth > table.parentElement.clientWidth + 1)
    .map((table) => `table ${table.scrollWidth} px in ${table.parentElement.clientWidth} px: ` +
      (table.querySelector("tr") || table).textContent.replace(/\s+/g, " ").trim().slice(0, 90)),
  ...[...document.querySelectorAll("article div.math")]
    .map((box) => [box, drawnWidth(box)])
    .filter(([box, width]) => width !== null && width > box.clientWidth + 1)
    .map(([box, width]) => `formula ${Math.round(width)} px in ` +
      `${box.clientWidth} px: ${box.textContent.trim().slice(0, 90)}`),
]
""")

# Chinese characters (CJK Unified Ideographs) in a text.
CJK = re.compile(r"[\u4e00-\u9fff]")
# Font families that have Chinese glyphs (Linux's Noto CJK and WenQuanYi, macOS, Windows).
CJK_FONT = re.compile(
    r"CJK|Han Sans|Han Serif|Noto Sans SC|Noto Serif SC|PingFang|Hiragino|YaHei|"
    r"WenQuanYi|Heiti|SimSun|SimHei|Songti|DengXian",
    re.I,
)


# The elements whose fonts are asked for, and those of them with Chinese in their own text (text
# nodes that are their children: an API signature's "[源代码]" is a link's, not the signature's),
# as ``[place among the elements, text]``.
CJK_ELEMENTS = "article p, article li, article h1, article h2, article dt"
CJK_OWN_TEXT_JS = r"""
(selector) => {
  const elements = [...document.querySelectorAll(selector)];
  const own = (el) => [...el.childNodes].filter((n) => n.nodeType === 3).map((n) => n.nodeValue).join("");
  return {
    count: elements.length,
    chinese: elements.flatMap((el, i) => /[\u4e00-\u9fff]/.test(own(el)) ?
      [[i, el.outerHTML.replace(/<[^>]+>/g, "").slice(0, 60)]] : []),
  };
}
"""


def cjk_fonts(context, page, limit: int = 40) -> dict:
    """The platform fonts Chromium drew the page's Chinese text with (DevTools protocol):
    ``{"checked": n, "without": [(text, fonts)]}``, ``without`` listing each element whose
    Chinese characters were drawn with no font that has Chinese glyphs (boxes, to a reader).
    The fonts Chromium reports are those of the element's own text, not its children's: only
    elements with Chinese in their own text are asked (found in the page, in one call)."""
    found = page.evaluate(CJK_OWN_TEXT_JS, CJK_ELEMENTS)
    client = context.new_cdp_session(page)
    try:
        client.send("DOM.enable")
        client.send("CSS.enable")
        root = client.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        # the same elements in the same (document) order as the page's querySelectorAll
        nodes = client.send("DOM.querySelectorAll", {"nodeId": root, "selector": CJK_ELEMENTS})[
            "nodeIds"
        ]
        assert len(nodes) == found["count"], (page.url, len(nodes), found["count"])
        checked, without = 0, []
        for index, text in found["chinese"]:
            if checked >= limit:
                break
            fonts = client.send("CSS.getPlatformFontsForNode", {"nodeId": nodes[index]})["fonts"]
            if not fonts:
                continue
            names = [f["familyName"] for f in fonts]
            checked += 1
            if not any(CJK_FONT.search(name) for name in names):
                without.append((text, names))
        return {"checked": checked, "without": without}
    finally:
        client.detach()


# Every image of the main content: its alt text, and the caption of the <figure> holding it.
FIGURES_JS = page_js(r"""
() => [...bookMain().querySelectorAll("img")].map((img) => {
  const figure = img.closest("figure");
  const caption = figure && figure.querySelector("figcaption");
  const text = caption && (caption.querySelector(".caption-text") || caption);  // without "Fig. 3"
  return {
    src: img.getAttribute("src") || "",
    alt: (img.getAttribute("alt") || "").trim(),
    full: img.src,
    link: img.closest("a") ? img.closest("a").href : null,
    inFigure: figure !== null,
    caption: text ? text.innerText.trim() : "",
  };
})
""")

# The state of solution ``index``. ``shown``: whether any text of its body (all but the summary
# or title) is rendered; innerText holds only rendered text.
SOLUTION_STATE_JS = page_js(r"""
(index) => {
  const el = solutions()[index];
  const head = solutionHead(el);
  const rendered = el.innerText.replace(head.innerText, "").trim();
  let body = "";
  for (const child of el.childNodes) if (child !== head) body += child.textContent;
  return {
    head: head.innerText.trim(),
    shown: rendered.length > 0 && el.getBoundingClientRect().height > head.getBoundingClientRect().height,
    body: body.trim().length,
  };
}
""")

# The element a reader clicks to open solution ``index``: its summary, or the block's title.
SOLUTION_HEAD_JS = page_js("(index) => solutionHead(solutions()[index])")


@dataclass
class PageReport:
    path: str
    console_errors: list = field(default_factory=list)
    page_errors: list = field(default_factory=list)
    failed_requests: list = field(default_factory=list)
    foreign_requests: list = field(default_factory=list)
    requests: int = 0
    data: dict = field(default_factory=dict)
    figures: list = field(default_factory=list)
    solutions: list = field(default_factory=list)  # (state before click, state after click)
    screenshot: Path | None = None
    final_url: str = ""  # differs from the page's own URL after a redirect
    cjk: dict = field(default_factory=dict)  # cjk_fonts() of a page with Chinese text
    narrow: dict = field(default_factory=dict)  # NARROW_JS at a phone's width
    wide_code: list = field(default_factory=list)  # WIDE_CODE_JS at WIDE_WIDTH (every page)


def site_path(url: str, origin: str) -> str | None:
    """The path under the site root that ``url`` names, or None for another origin or scheme."""
    parts = urlsplit(url)
    if f"{parts.scheme}://{parts.netloc}" != origin:
        return None
    path = unquote(parts.path).lstrip("/")
    return path + "index.html" if path == "" or path.endswith("/") else path


class Traffic:
    """The requests of one page still in flight, and when the last one started or ended."""

    QUIET_S = 0.15  # a page is settled once no request has started or ended for this long

    def __init__(self, page) -> None:
        self.page, self.pending, self.last = page, set(), time.monotonic()
        page.on("request", self._start)
        page.on("requestfinished", self._end)
        page.on("requestfailed", self._end)

    def _start(self, request) -> None:
        self.pending.add(request)
        self.last = time.monotonic()

    def _end(self, request) -> None:
        self.pending.discard(request)
        self.last = time.monotonic()

    def settle(self) -> None:
        """Return once no request is in flight and none has started or ended for ``QUIET_S``
        (Playwright's ``networkidle`` waits a fixed 500 ms instead, three times a page)."""
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while self.pending or (quiet := time.monotonic() - self.last) < self.QUIET_S:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.page.url}: requests still in flight after {TIMEOUT_MS} ms:"
                    f" {sorted(r.url for r in self.pending)[:5]}"
                )
            # lets Playwright deliver the page's events: while requests are in flight, 25 ms at a
            # time; once none is, until the quiet time is up (an event in between moves it on)
            self.page.wait_for_timeout(25 if self.pending else 5 + 1000 * (self.QUIET_S - quiet))


def console(message, report: PageReport) -> None:
    """Record a console error, but not Chromium's own request for ``/favicon.ico``: the site
    root's icon is the host's (on GitHub Pages the book lives under /attncourse/)."""
    if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
        report.console_errors.append(message.text)


def new_tab(context):
    """A tab that records what the page it holds does into that page's report (``tab.report``,
    set by ``open_page``). The crawl loads page after page into one tab: Chromium then keeps the
    renderer process and the scripts it compiled (every page loads the theme's 1.5 MB of Font
    Awesome), where a new tab per page cost four times the CPU."""
    tab = context.new_page()
    tab.traffic = Traffic(tab)
    tab.report, tab.origin = PageReport(""), ""

    def request(r):
        tab.report.requests += 1
        if not (r.url.startswith(tab.origin + "/") or r.url.startswith("data:")):
            tab.report.foreign_requests.append(r.url)  # and Chromium cannot resolve its host

    # Recorded, not intercepted: page.route would disable the browser's cache, so that every
    # page fetched the theme and MathJax again through this process.
    tab.on("request", request)
    tab.on("console", lambda m: console(m, tab.report))
    tab.on("pageerror", lambda e: tab.report.page_errors.append(str(e)))
    tab.on("requestfailed", lambda r: tab.report.failed_requests.append(f"{r.url} ({r.failure})"))
    tab.on(
        "response",
        lambda r: (
            r.status >= 400 and tab.report.failed_requests.append(f"{r.url} (HTTP {r.status})")
        ),
    )
    return tab


def open_page(tab, url: str, report: PageReport):
    """``url`` loaded into ``tab``, which records into ``report`` what it does, with MathJax
    finished and the network settled (``tab.traffic.settle()`` waits for it again)."""
    from playwright.sync_api import Error as PlaywrightError

    tab.traffic.settle()  # what the previous page still had in flight counts against it
    tab.report, tab.origin = report, "{0.scheme}://{0.netloc}".format(urlsplit(url))
    tab.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    tab.traffic.settle()  # a <meta http-equiv="refresh"> has fired by now
    for attempt in range(3):
        try:
            tab.evaluate("""async () => {
                  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
                  await document.fonts.ready;
                }""")
            break
        except PlaywrightError as error:  # the page navigated (a redirect) while it was being read
            if "context was destroyed" not in str(error) or attempt == 2:
                raise
            tab.wait_for_load_state("load", timeout=TIMEOUT_MS)
    tab.traffic.settle()
    report.final_url = tab.url
    return tab


def visit(
    tab,
    origin: str,
    path: str,
    *,
    screenshot: Path | None = None,
    chapter: bool = False,
    narrow: bool = False,
) -> PageReport:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    report = PageReport(path)
    page = open_page(tab, f"{origin}/{quote(path)}", report)
    report.data = page.evaluate(COLLECT_JS)
    if CJK.search(report.data["prose"]):
        report.cjk = cjk_fonts(page.context, page)
    if screenshot is not None:
        # The Chinese edition is the same page translated (cjk_fonts checks its glyphs): its first
        # screen is enough to see it drawn, where its whole length cost a quarter of the crawl.
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        full_page = FULL_PAGE_SCREENSHOTS and not path.startswith(CHINESE)
        page.screenshot(path=str(screenshot), full_page=full_page)
        report.screenshot = screenshot
    if chapter:
        report.figures = page.evaluate(FIGURES_JS)
        for index in range(report.data["solutions"]):
            before = page.evaluate(SOLUTION_STATE_JS, index)
            page.evaluate_handle(SOLUTION_HEAD_JS, index).as_element().click()
            try:  # give an animated dropdown a moment to open
                page.wait_for_function(
                    f"(index) => ({SOLUTION_STATE_JS})(index).shown", arg=index, timeout=2000
                )
            except PlaywrightTimeout:
                pass
            after = page.evaluate(SOLUTION_STATE_JS, index)
            report.solutions.append((before, after))
    # at a desktop's width, whatever the crawl's window is
    report.wide_code = evaluate_at_width(page, WIDE_WIDTH, WIDE_CODE_JS)
    if narrow:  # the same page, as a phone lays it out (no reload: the layout follows the width)
        report.narrow = evaluate_at_width(page, NARROW_WIDTH, NARROW_JS)
    page.traffic.settle()
    return report


def evaluate_at_width(page, width: int, script: str):
    """``script`` evaluated with the window ``width`` px wide, then the window's width put back."""
    size = page.viewport_size
    page.set_viewport_size({"width": width, "height": size["height"]})
    try:
        return page.evaluate(script)
    finally:
        page.set_viewport_size(size)


def crawl(
    tab,
    origin: str,
    site: Path,
    start: list[str],
    *,
    screenshots: dict[str, Path],
    chapters: set[str],
    narrow: frozenset[str] = frozenset(),
):
    """Visit ``start`` and every internal HTML page linked from a visited page, once each
    (``narrow``: the pages also read at a phone's width)."""
    reports: dict[str, PageReport] = {}
    queue = deque(start)
    while queue:
        path = queue.popleft()
        if path in reports or path.startswith(SOURCES_NOT_VISITED):
            continue
        reports[path] = report = visit(
            tab,
            origin,
            path,
            screenshot=screenshots.get(path),
            chapter=path in chapters,
            narrow=path in narrow,
        )
        for link in report.data["links"]:
            target = site_path(link["href"], origin)
            if (
                target
                and target.endswith(".html")
                and target not in reports
                and (site / target).is_file()
            ):
                queue.append(target)
    return reports


# -- judging the reports (pure functions, also run on hand-made pages) -----------------------


def load_problems(report: PageReport) -> list[str]:
    return (
        [f"console error: {m}" for m in report.console_errors]
        + [f"page error: {m}" for m in report.page_errors]
        + [f"failed request: {m}" for m in report.failed_requests]
    )


def link_problems(reports: dict[str, PageReport], origin: str, site: Path) -> tuple[list[str], int]:
    """Internal links whose file is missing or whose #fragment is no id of the target page."""
    problems, checked = [], 0
    for path, report in reports.items():
        for link in report.data["links"]:
            target = site_path(link["href"], origin)
            if target is None:
                continue
            checked += 1
            fragment = unquote(urlsplit(link["href"]).fragment)
            if not (site / target).is_file():
                problems.append(f"{path}: link {link['raw']!r} -> missing file {target}")
            elif fragment and target.endswith(".html"):
                # a Chinese module source (not visited) has the English one's ids
                seen = reports.get(target) or reports.get(target.removeprefix(CHINESE))
                ids = set(seen.data["ids"]) if seen else set()
                if fragment not in ids:
                    problems.append(
                        f"{path}: link {link['raw']!r} -> no id {fragment!r} on {target}"
                    )
    return problems, checked


def image_problems(report: PageReport) -> list[str]:
    return [
        f"image not loaded: {image['src']}"
        for image in report.data["images"]
        if not image["complete"] or image["width"] == 0
    ]


def math_problems(report: PageReport) -> list[str]:
    data = report.data
    problems = [f"raw TeX outside math: {text!r}" for text in data["strayTex"]]
    if data["math"] and not data["mathjax"]:
        problems.append(f"{len(data['math'])} math elements but MathJax is not loaded")
    for item in data["math"]:
        if not item["typeset"]:
            problems.append(f"math not typeset: {item['residual']!r}")
        elif item["residual"]:
            problems.append(f"raw TeX left beside MathJax's output: {item['residual']!r}")
        if item["error"]:
            problems.append("MathJax reports an error in a formula")
        if item.get("backslash"):
            problems.append(f"a backslash shows in typeset math: {item['tex']!r}")
    return problems


def figure_problems(figures: list[dict]) -> list[str]:
    """Each image must sit in a <figure> with a caption and carry alt text of its own (not its file name)."""
    problems = []
    for fig in figures:
        name = fig["src"].rsplit("/", 1)[-1]
        if not fig["alt"] or fig["alt"] == fig["src"] or fig["alt"].rsplit("/", 1)[-1] == name:
            problems.append(f"{name}: no alt text (alt={fig['alt']!r})")
        if not fig["inFigure"]:
            problems.append(f"{name}: not in a <figure>")
        elif not fig["caption"]:
            problems.append(f"{name}: <figure> without a caption")
    return problems


def solution_problems(report: PageReport) -> list[str]:
    problems = []
    for before, after in report.solutions:
        if before["shown"]:
            problems.append(f"{before['head']!r} is open before any click")
        if not after["shown"] or after["body"] == 0:
            problems.append(f"{before['head']!r} did not open on click")
    return problems


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        _unavailable(
            f"Playwright cannot be imported ({error}); `make test` installs it from"
            " requirements.txt"
        )
    executable = chromium_path()
    if executable is None:
        _unavailable(
            "Chromium not found: install Debian's chromium (`apt-get install chromium`) for the"
            " browser test"
        )
    try:
        playwright = sync_playwright().start()
    except Exception as error:  # Playwright's driver did not start
        _unavailable(f"Playwright cannot start: {error}")
    try:
        browser = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_ARGS, timeout=TIMEOUT_MS
        )
    except PlaywrightError as error:
        playwright.stop()
        _unavailable(f"Chromium at {executable} cannot be launched: {error}")
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture(scope="module")
def context(browser):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(TIMEOUT_MS)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def tab(context):
    """The tab the book is read in, one page after another (``new_tab``)."""
    page = new_tab(context)
    yield page
    page.close()


@pytest.fixture
def fresh_tab(context):
    """A tab of its own, for a test's hand-made pages."""
    page = new_tab(context)
    yield page
    page.close()


@pytest.fixture(scope="module")
def book(tab):
    """Every page visited: ``(origin, {path: PageReport})``."""
    if not (SITE / "index.html").is_file():
        message = f"{SITE.relative_to(ROOT)} has no built book: run `make book` first"
        if REQUIRED:
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    toc = [f"{prefix}{f}.html" for prefix in ("", CHINESE) for f in toc_files()]
    if SCREENSHOTS.exists():
        shutil.rmtree(SCREENSHOTS)
    with LocalServer(SITE) as server:
        # Every page reachable from the root, every page of the table of contents, and any other
        # HTML file of the build (the general index, the search page, ...). The Chinese
        # edition's module sources (zh/_modules/) are the English ones' code in a translated
        # frame: links to them are checked, the pages themselves visited in English only
        # (a quarter of the pages, and of the crawl's time).
        others = sorted(
            str(p.relative_to(SITE))
            for p in SITE.rglob("*.html")
            if "_static" not in p.relative_to(SITE).parts
        )
        reports = crawl(
            tab,
            server.origin,
            SITE,
            ["index.html"] + toc + others,
            screenshots={path: screenshot_path(path) for path in toc},
            chapters={f"{prefix}{f}.html" for prefix in ("", CHINESE) for f in chapter_files()},
            narrow=frozenset(toc),
        )
        write_summary(reports, server.origin)
        yield server.origin, reports


def screenshot_path(page: str) -> Path:
    """``_build/screenshots/<page>.png``: the page's file name, or its whole path where names repeat."""
    stems = [Path(f).name for f in toc_files()]
    name = (
        Path(page).stem
        if stems.count(Path(page).stem) == 1
        else page.removesuffix(".html").replace("/", "__")
    )
    if page.startswith(CHINESE):
        name = f"zh__{name}"
    return SCREENSHOTS / f"{name}.png"


def write_summary(reports: dict[str, PageReport], origin: str) -> None:
    """What was checked, for a reviewer: ``_build/screenshots/summary.json``."""
    summary = {
        "pages": sorted(reports),
        "internal_links": sum(
            1
            for r in reports.values()
            for link in r.data["links"]
            if site_path(link["href"], origin)
        ),
        "images": sum(len(r.data["images"]) for r in reports.values()),
        "math_elements": sum(len(r.data["math"]) for r in reports.values()),
        "requests": sum(r.requests for r in reports.values()),
        "solutions_clicked": sum(len(r.solutions) for r in reports.values()),
        "screenshots": sorted(
            str(r.screenshot.relative_to(ROOT)) for r in reports.values() if r.screenshot
        ),
    }
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


# -- the book -------------------------------------------------------------------------------


def _assert_none(problems: dict[str, list[str]]) -> None:
    problems = {page: p for page, p in problems.items() if p}
    assert not problems, "\n".join(f"{page}:\n  " + "\n  ".join(p) for page, p in problems.items())


def test_every_page_of_the_table_of_contents_is_built_and_visited(book):
    origin, reports = book
    toc = [f"{f}.html" for f in toc_files()]
    assert len(chapter_files()) >= 7
    assert [p for p in toc if p not in reports] == []
    for path in toc:
        assert screenshot_path(path).stat().st_size > 10_000, path
    landing = reports["index.html"]  # the site's root redirects to the book's first page
    assert landing.requests > 0 and site_path(landing.final_url, origin) == f"{toc_files()[0]}.html"


def test_no_console_errors_page_errors_or_failed_requests(book):
    origin, reports = book
    _assert_none({path: load_problems(report) for path, report in reports.items()})


def test_no_request_leaves_the_local_server(book):
    origin, reports = book
    _assert_none(
        {path: [f"request to {url}" for url in r.foreign_requests] for path, r in reports.items()}
    )


def test_internal_links_resolve(book):
    origin, reports = book
    problems, checked = link_problems(reports, origin, SITE)
    assert checked > 100, checked
    assert problems == [], "\n".join(problems)


def test_every_image_loads(book):
    origin, reports = book
    assert sum(len(r.data["images"]) for r in reports.values()) > 0
    _assert_none({path: image_problems(report) for path, report in reports.items()})


def test_math_is_typeset_by_mathjax_served_with_the_book(book):
    origin, reports = book
    _assert_none({path: math_problems(report) for path, report in reports.items()})
    with_math = [r for r in reports.values() if r.data["math"]]
    assert {f"{f}.html" for f in chapter_files()} <= {r.path for r in with_math}, (
        "every chapter has math"
    )
    for report in with_math:  # MathJax 3, loaded from the book's own _static/mathjax
        assert report.data["mathjax"].startswith("3."), (report.path, report.data["mathjax"])
        local = [
            s for s in report.data["scripts"] if site_path(s, origin) and "/_static/mathjax/" in s
        ]
        assert local and all(
            site_path(s, origin) or "mathjax" not in s.lower() for s in report.data["scripts"]
        )


def test_colab_link_of_each_chapter(book):
    origin, reports = book
    for doc in chapter_files():
        for prefix in ("", CHINESE):
            colab = {
                link["href"]
                for link in reports[f"{prefix}{doc}.html"].data["links"]
                if link["href"].startswith("https://colab.research.google.com/")
            }
            assert colab == {expected_colab_url(doc, chinese=bool(prefix))}, prefix + doc
        assert (ROOT / f"{doc}.ipynb").is_file()
        assert (ROOT / "notebooks" / "zh" / f"{doc.rsplit('/', 1)[-1]}.ipynb").is_file()


def test_solutions_start_collapsed_and_open_on_click(book):
    origin, reports = book
    pages = {f"{prefix}{doc}.html": doc for prefix in ("", CHINESE) for doc in chapter_files()}
    for page, doc in pages.items():
        assert len(reports[page].solutions) == solution_count(doc) > 0, page
    _assert_none({page: solution_problems(reports[page]) for page in pages})


def test_figures_have_captions_and_alt_text(book):
    origin, reports = book
    pages = [f"{prefix}{doc}.html" for prefix in ("", CHINESE) for doc in chapter_files()]
    _assert_none({page: figure_problems(reports[page].figures) for page in pages})
    # a tap on a figure opens its image full size: each image is a link to its own file
    assert sum(len(reports[page].figures) for page in pages) > 0
    _assert_none(
        {
            page: [
                f"{fig['src']}: links to {fig['link']}"
                for fig in reports[page].figures
                if fig["link"] != fig["full"]
            ]
            for page in pages
        }
    )


def distinctive_word(doc: str, reports: dict[str, PageReport]) -> str:
    """A word of the chapter's prose found in no other chapter's prose (the most frequent such)."""
    words = lambda text: re.findall(r"\b[a-z]{8,}\b", text.lower())  # noqa: E731
    others = set()
    for other in chapter_files():
        if other != doc:
            others.update(words(reports[f"{other}.html"].data["prose"]))
    counts = Counter(w for w in words(reports[f"{doc}.html"].data["prose"]) if w not in others)
    assert counts, f"{doc}: no word of its own"
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[0][0]


def search_finished(page) -> None:
    """Return once the search page has listed its results and fetched their summaries: a page
    left while it still fetched them leaves requests the tab never hears end, and no later
    page of that tab can settle (CI runs of 2026-11-27 and 2026-11-28)."""
    page.wait_for_function(  # the summary, written once the search has finished (any language)
        "() => ((document.querySelector('#search-results .search-summary') || {}).innerText"
        " || '').trim() !== ''",
        timeout=TIMEOUT_MS,
    )
    page.traffic.settle()  # the results' summaries, fetched after the list shows


def search_results(tab, origin: str, query: str, edition: str = "") -> list[str]:
    """The pages the search page of an edition (``""`` or ``CHINESE``) lists for ``query``."""
    report = PageReport(f"{edition}search.html")
    page = open_page(tab, f"{origin}/{edition}search.html?q={quote(query)}", report)
    search_finished(page)
    hrefs = page.eval_on_selector_all(
        "#search-results ul.search li a", "as => as.map((a) => a.href)"
    )
    assert load_problems(report) == [] and report.foreign_requests == []
    return sorted({site_path(h.split("#")[0].split("?")[0], origin) for h in hrefs})


def test_search_finds_each_chapter_by_a_word_of_it(book, tab):
    origin, reports = book
    assert search_results(tab, origin, "zqxwvjkplm") == []  # the search can come back empty
    for doc in chapter_files():
        word = distinctive_word(doc, reports)
        assert f"{doc}.html" in search_results(tab, origin, word), (doc, word)


# Words of the Chinese chapters (not only of the glossary, which names every term): found only
# where the search index splits Chinese into words (jieba) and keeps the course's terms whole.
CHINESE_SEARCHES = ("缓存", "因果掩码", "分块")


# The results' summaries on the search page: their text, whether they were typeset (the book's
# script marks each one) and how many formulas MathJax drew in them.
SUMMARIES_JS = r"""
() => [...document.querySelectorAll("#search-results p.context")].map((p) => ({
  text: p.innerText, typeset: p.dataset.typeset || null,
  formulas: p.querySelectorAll("mjx-container").length,
}))
"""


def search_summaries(tab, origin: str, query: str, edition: str = "") -> list[dict]:
    """The summaries of the results of ``query`` on an edition's search page, once typeset."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    assert search_results(tab, origin, query, edition)
    try:  # MathJax typesets each summary once it is written (tools/book_fixes.py)
        tab.wait_for_function(
            "() => [...document.querySelectorAll('#search-results p.context')]"
            ".every((p) => p.dataset.typeset === 'done')",
            timeout=10_000,
        )
    except PlaywrightTimeout:
        pass  # judged below: a summary left as the page's raw text
    return tab.evaluate(SUMMARIES_JS)


def test_search_summaries_show_formulas_typeset_not_raw_tex(book, tab):
    """A search for a word next to formulas: the summaries show them drawn by MathJax, never as
    TeX (\\( ... \\), \\[ ... \\], $$), in both editions."""
    origin, _ = book
    for edition in ("", CHINESE):
        summaries = search_summaries(tab, origin, "softmax", edition)
        assert summaries, edition
        raw = [s["text"][:160] for s in summaries if re.search(r"\\[()\[\]]|\$\$", s["text"])]
        assert raw == [], (edition, raw)
        assert any(s["formulas"] for s in summaries), (edition, summaries[:3])


def test_chinese_search_finds_the_chapters_that_use_a_word(book, tab):
    origin, reports = book
    chapters = {f"{CHINESE}{doc}.html" for doc in chapter_files()}
    found = {word: search_results(tab, origin, word, CHINESE) for word in CHINESE_SEARCHES}
    assert all(set(pages) & chapters for pages in found.values()), found


def test_the_language_switch_keeps_the_tab_the_search_and_the_anchor(book, tab):
    """From the English search page for a word, the switch opens the Chinese search page for
    the same word in the same tab; from a section of a chapter, the same section."""
    origin, _ = book
    pages = len(tab.context.pages)
    for start, expected in (
        ("search.html?q=cache", f"{CHINESE}search.html?q=cache"),
        (f"{chapter_files()[0]}.html#exercises", f"{CHINESE}{chapter_files()[0]}.html#exercises"),
    ):
        if start.startswith("search.html"):
            assert search_results(tab, origin, "cache")  # the search has finished
        else:
            open_page(tab, f"{origin}/{start}", PageReport(start))
        with tab.expect_navigation():
            tab.click("a.btn-language-switch")
        assert tab.url == f"{origin}/{expected}", (start, tab.url)
        assert len(tab.context.pages) == pages  # no new tab
        if start.startswith("search.html"):
            search_finished(tab)  # the Chinese search page fetches its summaries too
    assert search_results(tab, origin, "缓存", CHINESE)  # and the search ran there


# The text of the HTML outputs of a chapter (the boxes that check(), hint() and solution() print),
# against the background it is drawn on (the nearest opaque one), as WCAG computes contrast: every
# text of every such output, in the light and the dark colour scheme.
BOX_CONTRAST = """() => {
  const rgb = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(",").map(Number);
    return p.length === 4 && p[3] === 0 ? null : p.slice(0, 3);
  };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const contrast = (a, b) => {
    const [hi, lo] = [lum(a), lum(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const background = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const c = rgb(getComputedStyle(e).backgroundColor);
      if (c) return c;
    }
    return [255, 255, 255];
  };
  const boxes = [...document.querySelectorAll(".cell_output .output.text_html")];
  const low = [];
  for (const box of boxes) {
    for (const el of [box, ...box.querySelectorAll("*")]) {
      const own = [...el.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
      if (!own || el.getClientRects().length === 0) continue;
      const ratio = contrast(rgb(getComputedStyle(el).color), background(el));
      if (ratio < 4.5) low.push(`${ratio.toFixed(2)}:1 ${el.textContent.trim().slice(0, 50)}`);
    }
  }
  return { boxes: boxes.length, low, theme: document.documentElement.dataset.theme };
}"""


def test_exercise_boxes_are_readable_in_the_light_and_the_dark_scheme(book, tab):
    """check()'s, hint()'s and solution()'s boxes on a chapter page: every text at least 4.5:1
    against what it is drawn on (WCAG AA), with the reader's system light and dark."""
    origin, _ = book
    doc = chapter_files()[0]
    try:
        for scheme in ("light", "dark"):
            tab.emulate_media(color_scheme=scheme)
            page = open_page(tab, f"{origin}/{doc}.html", PageReport(f"{doc}.html"))
            found = page.evaluate(BOX_CONTRAST)
            assert found["theme"] == scheme and found["boxes"] > 3, found
            assert found["low"] == [], (scheme, found["low"])
    finally:
        tab.emulate_media(color_scheme=None)


def narrow_problems(report: PageReport) -> list[str]:
    """A page read at a phone's width: wider than the screen, or an inline formula cut off."""
    problems = [f"inline formula cut off: {text}" for text in report.narrow["clipped"]]
    if report.narrow["width"] > NARROW_WIDTH:
        problems.insert(0, f"{report.narrow['width']} px wide at {NARROW_WIDTH} px")
    return problems


def test_no_code_block_table_or_formula_is_wider_than_its_column_at_1280_px(book):
    """On every page, in both editions, in a 1280-px window: every code block fits its column
    (a chapter's cells at 80 characters a line, book/ruff.toml, in the font size book_fixes.py
    sets; the listings in an exercise's narrower box and the API page's examples shorter);
    every printed output wraps its long lines; every table (the pages' and those the cells
    print) fits the text column; and every displayed formula is drawn within it."""
    origin, reports = book
    pages = [f"{prefix}{doc}.html" for prefix in ("", CHINESE) for doc in toc_files()]
    _assert_none({page: reports[page].wide_code for page in pages})


def test_no_page_is_wider_than_a_phone_and_no_formula_is_cut_off(book):
    origin, reports = book
    toc = [f"{prefix}{doc}.html" for prefix in ("", CHINESE) for doc in toc_files()]
    assert all(reports[page].narrow for page in toc)
    _assert_none({page: narrow_problems(reports[page]) for page in toc})


# Where the chapter list (primary sidebar) and the page's contents (secondary) are once a button
# was clicked: each on screen (within the viewport, not hidden) or not.
NAVIGATION_JS = r"""
() => {
  const onScreen = (el) => {
    if (!el || el.getClientRects().length === 0) return false;
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    return r.width > 50 && r.height > 50 && r.left >= 0 && r.right <= innerWidth + 1 &&
      style.visibility !== "hidden";
  };
  const dialog = (id) => { const el = document.getElementById(id); return !!(el && el.open); };
  return {
    chapters: onScreen(document.querySelector(".bd-docs-nav")),
    contents: onScreen(document.querySelector("#pst-page-toc-nav")),
    chaptersDialog: dialog("pst-primary-sidebar-modal"),
    contentsDialog: dialog("pst-secondary-sidebar-modal"),
  };
}
"""


def navigation_problems(tab, url: str, width: int) -> list[str]:
    """Click the visible buttons of a chapter page at ``width`` px as a reader does: below 992 px
    each opens its panel (the chapter list, the page's contents) over the page and Escape closes
    it; wider, the chapter list's button hides the sidebar and shows it again."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    def after(click: str, expect: str) -> dict:
        tab.locator(f".bd-header-article {click}").filter(visible=True).first.click()
        try:
            tab.wait_for_function(f"() => ({NAVIGATION_JS})(){expect}", timeout=2000)
        except PlaywrightTimeout:
            pass
        return tab.evaluate(NAVIGATION_JS)

    tab.set_viewport_size({"width": width, "height": 900})
    open_page(tab, url, PageReport(url))
    problems = []
    if width < 992:
        for button, panel in ((".primary-toggle", "chapters"), (".secondary-toggle", "contents")):
            state = after(button, f".{panel}Dialog && ({NAVIGATION_JS})().{panel}")
            if not (state[f"{panel}Dialog"] and state[panel]):
                problems.append(f"{width} px: the {panel} button opened nothing ({state})")
            tab.keyboard.press("Escape")
            tab.wait_for_function(f"() => !({NAVIGATION_JS})().{panel}Dialog", timeout=2000)
    else:
        if not tab.evaluate(NAVIGATION_JS)["chapters"]:
            problems.append(f"{width} px: no chapter list beside the page")
        elif after(".primary-toggle", ".chapters === false")["chapters"]:
            problems.append(f"{width} px: the chapter list's button did not hide it")
        elif not after(".primary-toggle", ".chapters")["chapters"]:
            problems.append(f"{width} px: the chapter list's button did not show it again")
    return problems


def test_the_visible_buttons_open_the_navigation(book, tab):
    origin, reports = book
    doc = chapter_files()[0]
    size = tab.viewport_size
    try:
        _assert_none(
            {
                f"{prefix}{doc}.html": [
                    problem
                    for width in (390, 768, 1280)
                    for problem in navigation_problems(tab, f"{origin}/{prefix}{doc}.html", width)
                ]
                for prefix in ("", CHINESE)
            }
        )
    finally:
        tab.set_viewport_size(size)


def test_the_chinese_edition_speaks_chinese_around_the_page(book):
    """The theme's buttons, tooltips and search field on every Chinese chapter page: in Chinese
    (Simplified: 打印为 PDF, not the theme's 列印成 PDF)."""
    origin, reports = book
    problems = {}
    for doc in chapter_files():
        frame = reports[f"{CHINESE}{doc}.html"].data["frame"]
        problems[doc] = [
            f"{name}: {text!r}" for name, text in frame.items() if not text or not CJK.search(text)
        ]
        if frame["pdf"] != "打印为 PDF":
            problems[doc].append(f"pdf: {frame['pdf']!r}")
    _assert_none(problems)


# -- the checks themselves, on hand-made pages ----------------------------------------------

BROKEN_PAGE = """<!doctype html><html><head><title>broken</title></head><body><main><article>
<p>Prose with raw \\(x^2\\) left over.</p>
<span class="math">\\(y\\)</span>
<a href="missing.html">missing page</a> <a href="index.html#nowhere">missing id</a> <a href="#here">fine</a>
<span id="here"></span>
<img src="missing.png" alt="a missing image">
<img src="https://cdn.example.invalid/logo.png" alt="a foreign image">
<script>console.error("boom"); undefinedFunction();</script>
</article></main></body></html>"""

FIGURES_PAGE = """<!doctype html><html><body><main><article>
<figure><img src="_images/a.png" alt="Attention weights of head 1">
<figcaption>Head 1 attends to the diagonal.</figcaption></figure>
<figure><img src="_images/b.png" alt="_images/b.png"><figcaption>Caption.</figcaption></figure>
<figure><img src="_images/c.png" alt="Loss curve"><figcaption> </figcaption></figure>
<div><img src="_images/d.png" alt="Heat map"></div>
<img src="_images/e.png">
</article></main></body></html>"""

SOLUTIONS_PAGE = """<!doctype html><html><body><main><article>
<details><summary><b>Solution of a</b> (click to show)</summary>The answer is 42.<br>Because.</details>
<details open><summary><b>Solution of b</b></summary><pre>x = 1</pre></details>
<details><summary><b>Solution of c</b></summary></details>
</article></main></body></html>"""


CLEAN_PAGE = """<!doctype html><html><head><title>clean</title></head><body><main><article>
<p>Nothing wrong here.</p></article></main></body></html>"""


def test_the_checks_catch_a_broken_page(fresh_tab, tmp_path):
    (tmp_path / "index.html").write_text(BROKEN_PAGE)
    (tmp_path / "clean.html").write_text(CLEAN_PAGE)
    with LocalServer(tmp_path) as server:
        # one tab, as the crawl reads the book: the page read after the broken one gets none of
        # its faults
        reports = {
            path: visit(fresh_tab, server.origin, path) for path in ("index.html", "clean.html")
        }
        links, checked = link_problems(reports, server.origin, tmp_path)
    clean = reports["clean.html"]
    assert (clean.requests, load_problems(clean), clean.foreign_requests) == (1, [], [])
    report = reports["index.html"]
    assert report.foreign_requests == ["https://cdn.example.invalid/logo.png"]
    assert any("boom" in m for m in report.console_errors)
    assert any("undefinedFunction" in m for m in report.page_errors)
    assert any("missing.png (HTTP 404)" in m for m in report.failed_requests)
    assert checked == 3 and len(links) == 2
    assert "missing file missing.html" in links[0] and "no id 'nowhere'" in links[1]
    assert len(image_problems(report)) == 2
    assert math_problems(report) == [
        "raw TeX outside math: 'Prose with raw \\\\(x^2\\\\) left over.'",
        "1 math elements but MathJax is not loaded",
        "math not typeset: '\\\\(y\\\\)'",
    ]


MATH_PAGE = """<!doctype html><html><head><title>math</title>
<script>window.MathJax = {options: {processHtmlClass: "math"}};</script>
<script defer src="mathjax/tex-chtml.js"></script></head><body><main><article>
<p><span class="math notranslate nohighlight">\\(\\text{kv\\_heads} \\cdot d_k\\)</span>,
<span class="math notranslate nohighlight">\\(\\text{kv heads} \\setminus d_k\\)</span>,
<span class="math notranslate nohighlight">\\(\\sqrt{\\text{hidden\\_size}}\\)</span></p>
</article></main></body></html>"""


def with_mathjax(directory: Path) -> None:
    """The MathJax the book serves, linked into ``directory`` for a hand-made page (skips the
    calling test when it is not installed)."""
    mathjax = Path(
        str(
            importlib.metadata.distribution("sphinx-mathjax-offline").locate_file(
                "sphinx-mathjax-offline/static/mathjax"
            )
        )
    )
    if not (mathjax / "tex-chtml.js").is_file():
        pytest.skip("sphinx-mathjax-offline's MathJax is not installed")
    (directory / "mathjax").symlink_to(mathjax, target_is_directory=True)


def test_the_math_check_catches_a_backslash_shown_in_typeset_math(fresh_tab, tmp_path):
    """MathJax draws ``\\_`` inside ``\\text{...}`` as a backslash and an underscore: a reader sees it."""
    with_mathjax(tmp_path)
    (tmp_path / "index.html").write_text(MATH_PAGE)
    with LocalServer(tmp_path) as server:
        report = visit(fresh_tab, server.origin, "index.html")
    assert [m["typeset"] for m in report.data["math"]] == [True, True, True]
    assert math_problems(report) == [
        "a backslash shows in typeset math: '\\\\text{kv\\\\_heads} \\\\cdot d_k'",
        "a backslash shows in typeset math: '\\\\sqrt{\\\\text{hidden\\\\_size}}'",
    ]


WIDE_PAGE = """<!doctype html><html><head><title>wide</title>
<script>window.MathJax = {options: {processHtmlClass: "math"}};</script>
<script defer src="mathjax/tex-chtml.js"></script></head><body><main><article>
<div style="width: 400px"><pre>x = 1</pre><pre>y = 2  # LONG_COMMENT</pre>
<div class="cell_output"><pre>an HTML output, no stream: LONG_COMMENT</pre></div>
<div class="math notranslate nohighlight">\\[a + b\\]</div>
<div class="math notranslate nohighlight">\\[LONG_SUM\\]</div></div>
</article></main></body></html>""".replace("LONG_COMMENT", "a comment " * 12).replace(
    "LONG_SUM", " + ".join(f"a_{{{i}}}" for i in range(40))
)


def test_the_width_check_finds_a_listing_and_a_formula_wider_than_their_column(fresh_tab, tmp_path):
    """A listing wider than its box (an exercise's is narrower than the page's column) and a
    displayed formula drawn past the column are reported; what fits is not, nor an HTML output
    (the printed outputs are checked by their own rule)."""
    with_mathjax(tmp_path)
    (tmp_path / "index.html").write_text(WIDE_PAGE)
    with LocalServer(tmp_path) as server:
        report = visit(fresh_tab, server.origin, "index.html")
    listing, formula = report.wide_code  # and nothing else
    assert re.fullmatch(r"\d+ px in 400 px: y = 2  # a comment .*", listing), listing
    assert re.fullmatch(r"formula \d+ px in 400 px: a0\+a1\+.*", formula), formula


def test_figure_and_solution_checks_on_hand_made_pages(fresh_tab, tmp_path):
    (tmp_path / "figures.html").write_text(FIGURES_PAGE)
    (tmp_path / "solutions.html").write_text(SOLUTIONS_PAGE)
    with LocalServer(tmp_path) as server:
        figures = visit(fresh_tab, server.origin, "figures.html", chapter=True)
        solutions = visit(fresh_tab, server.origin, "solutions.html", chapter=True)
    assert figure_problems(figures.figures) == [
        "b.png: no alt text (alt='_images/b.png')",
        "c.png: <figure> without a caption",
        "d.png: not in a <figure>",
        "e.png: no alt text (alt='')",
        "e.png: not in a <figure>",
    ]
    assert [(b["shown"], a["shown"]) for b, a in solutions.solutions] == [
        (False, True),
        (True, False),
        (False, False),
    ]
    assert solution_problems(solutions) == [
        "'Solution of b' is open before any click",
        "'Solution of b' did not open on click",
        "'Solution of c' did not open on click",
    ]


def test_every_page_has_a_chinese_edition_and_links_to_it(book):
    origin, reports = book
    for doc in toc_files():
        english, chinese = reports.get(f"{doc}.html"), reports.get(f"{CHINESE}{doc}.html")
        assert english is not None and chinese is not None, doc
        assert (english.data["lang"], chinese.data["lang"]) == ("en", "zh-CN"), doc
        assert site_path(english.data["languageSwitch"], origin) == f"{CHINESE}{doc}.html", doc
        assert site_path(chinese.data["languageSwitch"], origin) == f"{doc}.html", doc
        assert screenshot_path(f"{CHINESE}{doc}.html").stat().st_size > 10_000, doc


def test_chinese_text_is_drawn_with_a_font_that_has_chinese_glyphs(book):
    origin, reports = book
    with_chinese = {path: r for path, r in reports.items() if r.cjk}
    translated = [f"{CHINESE}{doc}.html" for doc in toc_files() if not doc.endswith("/api")]
    assert set(translated) <= set(with_chinese), set(translated) - set(with_chinese)
    assert "book/glossary.html" in with_chinese  # the English glossary gives the Chinese terms
    for path in translated:
        assert with_chinese[path].cjk["checked"] >= 3, path
    _assert_none(
        {
            path: [f"{text!r} drawn with {fonts}" for text, fonts in r.cjk["without"]]
            for path, r in with_chinese.items()
        }
    )
