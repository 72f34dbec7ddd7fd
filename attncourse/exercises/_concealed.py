"""Text kept unreadable in the package source: worked answers and the known wrong values of
numeric exercises (an obstacle to reading ahead, not encryption)."""

import base64

_KEY = b"attncourse"


def conceal(text: str) -> str:
    """Encode ``text`` so that it cannot be read in the package source (not encryption)."""
    raw = text.encode()
    return base64.b64encode(bytes(b ^ _KEY[i % len(_KEY)] for i, b in enumerate(raw))).decode()


def reveal(encoded: str) -> str:
    """Decode a string made by :func:`conceal`."""
    raw = base64.b64decode(encoded)
    return bytes(b ^ _KEY[i % len(_KEY)] for i, b in enumerate(raw)).decode()
