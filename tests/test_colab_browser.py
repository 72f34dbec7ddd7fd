"""The Colab edition rendered as a Jupyter front end renders it, and read in headless Chromium.

Each notebook of ``notebooks/`` is converted to HTML with nbconvert's classic template (the
notebook's Markdown rendered as CommonMark, its math left to MathJax), with MathJax 3.2.2
served locally (the copy the book itself serves, from ``sphinx-mathjax-offline``) and
configured as Jupyter configures it (``$...$`` and ``$$...$$``, environments processed).
The page is opened in the browser test's Chromium (``tests/test_book_browser.py``): every
formula must be typeset without error (or unknown macro), no raw TeX (``$$``, ``\\frac``) and no raw MyST may
show in the page's text, and each exercise must have its "Exercise N.k" heading. A
full-page screenshot of each chapter goes to ``_build/colab_screenshots/<name>.png``.

The same check run on a chapter of ``book/`` itself (what Colab would show without the
Colab edition) fails, which shows that it can.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import re
import shutil
from pathlib import Path

import pytest
from project_tools import ROOT, colab
from test_book_browser import TIMEOUT_MS, LocalServer, browser  # noqa: F401 - browser is a fixture

CHAPTERS = [doc for doc, _ in colab.chapters()]
SCREENSHOTS = ROOT / "_build" / "colab_screenshots"
# Jupyter's MathJax 3 settings (JupyterLab's and Notebook 7's): dollars for inline and display math.
MATHJAX_CONFIG = """<script>
window.MathJax = {
  tex: {inlineMath: [["$", "$"], ["\\\\(", "\\\\)"]], displayMath: [["$$", "$$"], ["\\\\[", "\\\\]"]],
        processEscapes: true, processEnvironments: true},
  options: {ignoreHtmlClass: "tex2jax_ignore", processHtmlClass: "tex2jax_process"},
};
</script>
"""

READ_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  await document.fonts.ready;
  const skip = (node) => node.parentElement.closest("pre, code, mjx-container, script, style, .input, .output_wrapper");
  let text = "";
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) if (!skip(n)) text += n.textContent + "\n";
  return {
    mathjax: (window.MathJax && MathJax.version) || null,
    typeset: document.querySelectorAll("mjx-container").length,
    // A TeX error, or a macro MathJax does not know (its noundefined package shows it in red).
    errors: document.querySelectorAll(
      "mjx-merror, [data-mjx-error], mjx-container mjx-mtext[style*='color: red']").length,
    text: text,
    exercises: [...document.querySelectorAll("h3")].map((h) => h.innerText.trim()).filter((t) => /^Exercise /.test(t)),
    figures: [...document.querySelectorAll("p")].map((p) => p.innerText.trim()).filter((t) =>
    /^Figure \d+(\.\d+)*\. /.test(t)).length,
    blockquotes: document.querySelectorAll("blockquote").length,
  };
}
"""
RAW_TEX = re.compile(
    r"\$\$|\\(?:frac|operatorname|sqrt|left|right|top|mathbb|begin|end)\b|\$[^$\s][^$\n]*\$"
)
RAW_MYST = re.compile(r"\{[a-z][\w:-]*\}`|:::|```\{|:label:|^\([\w-]+\)=\s*$", re.M)


def mathjax_folder() -> Path:
    folder = Path(
        importlib.metadata.distribution("sphinx-mathjax-offline").locate_file(
            "sphinx-mathjax-offline/static/mathjax"
        )
    )
    assert (folder / "tex-chtml-full.js").is_file(), folder
    return folder


@functools.cache
def exporter():
    """nbconvert's classic HTML exporter, loading MathJax from ``mathjax/`` (one for every
    notebook: it loads and compiles its templates once)."""
    from nbconvert import HTMLExporter

    html = HTMLExporter(template_name="classic")
    html.mathjax_url = "mathjax/tex-chtml-full.js"
    return html


def render(nb: dict, destination: Path) -> None:
    """``nb`` as nbconvert's classic template writes it, loading MathJax from ``mathjax/`` beside it."""
    import nbformat

    html, _ = exporter().from_notebook_node(nbformat.from_dict(nb))
    script = '<script src="mathjax/tex-chtml-full.js">'
    assert script in html, "nbconvert's template no longer loads MathJax from mathjax_url"
    destination.write_text(html.replace(script, MATHJAX_CONFIG + script, 1))


def read_page(tab, url: str, screenshot: Path | None) -> dict:
    tab.goto(url, wait_until="load", timeout=TIMEOUT_MS)
    data = tab.evaluate(READ_JS)
    if screenshot is not None:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        tab.screenshot(path=str(screenshot), full_page=True)
    return data


def page_problems(data: dict, expected_exercises: list[str]) -> list[str]:
    problems = []
    if not data["mathjax"] or not data["mathjax"].startswith("3."):
        problems.append(f"MathJax 3 did not load (version {data['mathjax']!r})")
    if data["typeset"] == 0:
        problems.append("no formula typeset")
    if data["errors"]:
        problems.append(f"{data['errors']} formulas with MathJax errors")
    problems += [
        f"raw TeX in the page: {m.group(0)!r} in"
        f" {data['text'][max(0, m.start() - 40) : m.end() + 40]!r}"
        for m in list(RAW_TEX.finditer(data["text"]))[:5]
    ]
    problems += [
        f"raw MyST in the page: {m.group(0)!r} in"
        f" {data['text'][max(0, m.start() - 40) : m.end() + 40]!r}"
        for m in list(RAW_MYST.finditer(data["text"]))[:5]
    ]
    shown = [
        re.match(r"Exercise \d+(\.\d+)*", heading).group(0)
        for heading in data["exercises"]
        if re.match(r"Exercise \d+(\.\d+)*", heading)
    ]
    if shown != expected_exercises:
        problems.append(f"exercise headings {shown}, expected {expected_exercises}")
    return problems


def expected_exercises(doc: str) -> list[str]:
    chapter = colab.book_index()[doc]
    return [f"Exercise {t.number}" for t in chapter.targets.values() if t.kind == "Exercise"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, browser):  # noqa: F811 - the fixture imported above
    """Every generated notebook rendered, and the book's first chapter as it is plus a bad
    macro (the counter-example)."""
    folder = tmp_path_factory.mktemp("colab-html")
    shutil.copytree(mathjax_folder(), folder / "mathjax")
    for doc in CHAPTERS:
        render(
            json.loads((colab.OUT / f"{Path(doc).name}.ipynb").read_text()),
            folder / f"{Path(doc).name}.html",
        )
    raw = json.loads((ROOT / f"{CHAPTERS[0]}.ipynb").read_text())
    raw["cells"].append(
        {
            "cell_type": "markdown",
            "id": "bad-macro",
            "metadata": {},
            "source": "A macro MathJax lacks: $\\notamacro{x}$.",
        }
    )
    render(raw, folder / "raw-book-chapter.html")
    context = browser.new_context(viewport={"width": 1100, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    # One tab reads every page, one after another: Chromium keeps its renderer and the MathJax it
    # compiled (a new tab per page took twice the CPU). Nothing but the local server is reached.
    tab = context.new_page()
    with LocalServer(folder) as server:
        origin = server.origin
        tab.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith(origin + "/") else r.abort()
        )
        yield tab, origin
    context.close()


@pytest.mark.parametrize("doc", CHAPTERS, ids=[Path(d).name for d in CHAPTERS])
def test_colab_notebook_renders_cleanly(doc, served):
    tab, origin = served
    name = Path(doc).name
    data = read_page(tab, f"{origin}/{name}.html", SCREENSHOTS / f"{name}.png")
    assert page_problems(data, expected_exercises(doc)) == []
    nb = json.loads((ROOT / f"{doc}.ipynb").read_text())
    assert data["figures"] == sum(
        1 for c in nb["cells"] if c.get("metadata", {}).get("mystnb", {}).get("figure")
    )
    assert data["blockquotes"] >= 1  # the learning objectives box
    assert (SCREENSHOTS / f"{name}.png").stat().st_size > 10_000


def test_the_check_fails_on_the_books_own_notebook(served):
    tab, origin = served
    data = read_page(tab, f"{origin}/raw-book-chapter.html", None)
    problems = page_problems(data, expected_exercises(CHAPTERS[0]))
    assert any(p.startswith("raw MyST") for p in problems)
    assert any(p.startswith("exercise headings") for p in problems)
    assert any("MathJax errors" in p for p in problems)  # the undefined macro appended to the page
    broken = dict(
        data,
        typeset=0,
        errors=1,
        mathjax=None,
        text=data["text"] + "\nthe formula $$\\frac{a}{b}$$ raw",
    )
    problems = page_problems(broken, [])
    for expected in ("MathJax 3 did not load", "no formula typeset", "MathJax errors", "raw TeX"):
        assert any(p.startswith(expected) or expected in p for p in problems), expected
