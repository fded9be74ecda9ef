"""Every option of `vllm serve` 0.33.0, and which option an argv token sets — the way vLLM's own
parser decides it.

The table (``data/vllm-0.33.0-serve-options.json``) is generated from vLLM's parser by
``hack/gen_vllm_options.py`` and kept true by ``tests/contract/test_vllm_options.py``. The
resolution follows vllm/utils/argparse_utils.py (``FlexibleArgumentParser.parse_args``: ``_`` →
``-`` in long names, dotted JSON keys ``--opt.key``, ``-O3``) and then CPython's argparse
(``_parse_optional``/``_get_option_tuples``: exact option strings, ``--opt=value``, unique prefixes
of long options when ``allow_abbrev`` — vLLM leaves it on — and, for single-dash options, any
option string the token is a prefix of, or a one-letter option with its value attached, ``-q4``).
Where CPython versions differ (3.11 refuses a prefix shared by two strings of one action, newer
ones accept it), :func:`resolve` returns every option a token could mean, so a check over the
result is right on both.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

TABLE_FILE = "vllm-0.33.0-serve-options.json"
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


@dataclass(frozen=True)
class Option:
    """One `vllm serve` option: ``dest`` (argparse dest), ``strings`` (every spelling argparse
    knows, e.g. ``--tensor-parallel-size``, ``-tp``), whether it takes a value."""

    dest: str
    strings: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...] | None
    nargs: str = "1"
    """argparse's nargs: ``1`` (exactly one value), ``0`` (a flag), ``?`` (one, optional), ``+`` (one
    or more), ``*`` (any number), or a count."""

    @property
    def name(self) -> str:
        """The long name without dashes (``tensor-parallel-size``)."""
        own = self.dest.replace("_", "-")
        if f"--{own}" in self.strings:
            return own
        return next(s[2:] for s in self.strings if s.startswith("--") and not s.startswith("--no-"))


@dataclass(frozen=True)
class Resolved:
    """What one argv token sets: the options it may mean (one, unless CPython versions disagree
    or it is ambiguous) and the value attached to it (``--x=v``, ``-q4``), if any."""

    options: tuple[Option, ...]
    attached: str | None
    subkey: str | None = None
    """The dotted key of ``--opt.key`` / ``-o.key`` (``key.sub`` nested; a trailing ``+`` appends to
    a list), which FlexibleArgumentParser turns into ``--opt '{"key": value}'``."""

    @property
    def ambiguous(self) -> bool:
        return len({o.dest for o in self.options}) > 1


class OptionTable:
    """Lookup over the generated table."""

    def __init__(self, raw: dict):
        self.vllm_version: str = raw["vllm_version"]
        self.allow_abbrev: bool = raw["allow_abbrev"]
        self.options = tuple(Option(o["dest"], tuple(o["strings"]), o["takes_value"],
                                    tuple(o["choices"]) if o["choices"] is not None else None, o["nargs"])
                             for o in raw["options"])
        self.by_string = {s: o for o in self.options for s in o.strings}
        self.by_name = {o.name: o for o in self.options}

    def option(self, name: str) -> Option:
        """The option of long name ``name`` (no dashes). KeyError when vLLM has none."""
        return self.by_name[name]

    def resolve(self, token: str) -> Resolved | None:
        """The option(s) ``token`` sets, or None when vLLM's parser reads it as a positional or a
        value (no leading ``-``, a negative number, ``-`` alone, a space inside an unknown token).
        An unknown option gives a :class:`Resolved` with no options."""
        if not token or token[0] != "-" or token == "-" or _NEGATIVE_NUMBER.match(token):
            return None
        if token.startswith("--"):
            return self._long(token)
        if token.startswith("-O") and token != "-O":
            return Resolved((self.by_string["--optimization-level"],), token[3:] if token[2:3] == "=" else token[2:])
        if token == "-O":
            return Resolved((self.by_string["--optimization-level"],), None)
        return self._short(token)

    def _long(self, token: str) -> Resolved | None:
        key, eq, value = token.partition("=")
        head, dot, sub = key[2:].partition(".")
        key = "--" + head.replace("_", "-")
        attached = value if eq else None
        subkey = sub.rstrip("+") if dot else None  # --opt.key v: --opt '{"key": v}' for argparse
        if key in self.by_string:
            return Resolved((self.by_string[key],), attached, subkey)
        if key == "--":
            return Resolved((), None)
        found = [o for s, o in self.by_string.items() if self.allow_abbrev and s.startswith(key)]
        if not found and " " in token:
            return None
        return Resolved(_unique(found), attached, subkey)

    def _short(self, token: str) -> Resolved | None:
        if token in self.by_string:
            return Resolved((self.by_string[token],), None)
        key, eq, value = token.partition("=")
        if eq and key in self.by_string:
            return Resolved((self.by_string[key],), value)
        head, dot, sub = key.partition(".")
        if dot and head in self.by_string:  # -o.key v: dotted JSON keys work with single-dash options too
            return Resolved((self.by_string[head],), value if eq else None, sub.rstrip("+"))
        found = [o for s, o in self.by_string.items() if s.startswith(token) or (eq and s.startswith(key))]
        attached = None
        if len(token) > 2 and token[:2] in self.by_string:
            found.append(self.by_string[token[:2]])
            attached = token[2:]
        if not found and " " in token:
            return None
        return Resolved(_unique(found), attached)


def _unique(options: list[Option]) -> tuple[Option, ...]:
    seen: dict[str, Option] = {}
    for o in options:
        seen.setdefault(o.dest, o)
    return tuple(seen[d] for d in sorted(seen))


@cache
def serve_options() -> OptionTable:
    """The `vllm serve` option table of vLLM 0.33.0."""
    raw = json.loads(resources.files("qdd.catalog").joinpath("data", TABLE_FILE).read_text())
    return OptionTable(raw)
