"""Text that reaches a status or an Event, made safe in one place.

Strings qdd writes into a status or an Event partly come from outside: a router's answer (the
canary), a benchmark pod's termination message, a resource's own fields. ``kubectl describe`` and
``kubectl get -o yaml`` print them to a terminal, and the API server must be able to store them.
So every such string passes :func:`safe_text`:

- C0 and C1 control characters (ESC sequences that repaint a terminal or forge a hyperlink, CR/LF
  that forge a line, NUL), DEL, the Unicode line/paragraph separators and the bidirectional and
  zero-width format characters ("Trojan Source", CVE-2021-42574) are written as visible escapes
  (``\\x1b``, ``\\u202e``), never dropped silently;
- a lone surrogate (JSON's ``"\\ud800"`` decodes to one; it has no UTF-8 form, so the write would
  fail) is escaped the same way;
- the result is cut to ``limit`` characters with ``…``.

:func:`safe_value` applies it to every string of a status and replaces a float the JSON of a patch
cannot carry (NaN, ±infinity): dropped from a mapping, None in a list.
"""

from __future__ import annotations

import math
import re
from typing import Any

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def safe_text(text: str, limit: int | None = None) -> str:
    """``text`` with the characters above escaped, at most ``limit`` characters (None: no limit)."""
    out = _UNSAFE.sub(_escape, text)
    return out if limit is None or len(out) <= limit else out[:max(limit - 1, 0)] + "…"


def safe_value(value: Any) -> Any:
    """A copy of a status (dicts, lists, scalars) with every string (keys too) through
    :func:`safe_text`; a non-finite float is left out of its mapping (None in a list)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: w for k, v in value.items()
                if (w := safe_value(v)) is not None or v is None}
    if isinstance(value, list | tuple):
        return [safe_value(v) for v in value]
    return value
