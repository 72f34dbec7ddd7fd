"""A Sphinx extension (listed in ``_config.yml``) that removes two console errors every page of
a Jupyter Book 1 site would otherwise show in the reader's browser:

* Sphinx 7.4 writes each inline script that an extension adds after the builder starts twice
  (once as ``_JavaScript(None, body=...)``, once as ``_JavaScript('', body=...)``, which do not
  compare equal). sphinx-thebe's ``const THEBE_JS_URL = ...`` then fails the second time with
  "Identifier 'THEBE_JS_URL' has already been declared". Each page keeps the first copy.
* The theme starts a reader's first visit in the mode of the ``default_mode`` template
  variable, empty unless set, and logs "Got invalid theme mode" for the empty one. ``auto``
  (follow the system's light or dark setting) is what the theme then falls back to anyway.

``tests/test_book_browser.py`` fails on any console or page error, so it checks both.
"""
from __future__ import annotations


def _fix_page(app, pagename, templatename, context, doctree) -> None:
    context.setdefault("default_mode", "auto")
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        filename = getattr(script, "filename", script)
        if not filename:  # an inline script: the same body twice is the same script
            attributes = getattr(script, "attributes", {})
            key = (getattr(script, "priority", None), tuple(sorted(attributes.items())))
            if key in seen:
                continue
            seen.add(key)
        kept.append(script)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _fix_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
