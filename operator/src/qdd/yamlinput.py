"""Reading YAML that a user gives the CLI the way ``kubectl apply`` reads it, with the limits an
API server has: ``qdd render`` sees the same values the API server would, and no input can make
``qdd`` hang or run out of memory before validation starts.

Values as kubectl reads them (sigs.k8s.io/yaml, a YAML 1.1 reader in Go, then JSON): booleans
include ``y``/``n``; integers may have ``_`` and ``0x``/``0o``/``0b``/leading-``0`` octal forms but
no base-60 (``68:16`` is a string); floats need no dot (``1e3``); a float with an integral value
becomes a JSON integer (``4096.0`` is 4096); dates stay strings. PyYAML's own YAML 1.1 rules
differ in each of these.

Limits:
- at most :data:`MAX_BYTES` (1.5 MiB, etcd's default object size limit: nothing larger can be a
  custom resource);
- at most :data:`MAX_NODES` values, counted while parsing and again with aliases expanded (a
  "billion laughs" document of a few lines expands exponentially), and no alias that refers to a
  node containing itself;
- no key twice in one mapping: kubectl would keep the last silently, so two ``cluster:`` blocks,
  or two resources pasted without ``---``, would lose fields unseen — qdd refuses instead;
- nesting at most :data:`MAX_DEPTH` levels (a QwenDisaggDeployment is 6 deep; deeper input
  would only reach Python's recursion limit); integers of at most 4,300 digits (Python's limit).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml
from yaml import _yaml  # libyaml (PyYAML wheels ship it; qdd.yamlinput needs it)
from yaml.events import CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 1_572_864
MAX_DEPTH = 64
MAX_NODES = 100_000

_BOOL = re.compile(r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$")
_INT = re.compile(r"^[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)$")
_FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                    r"|\.(?:nan|NaN|NAN))$")
_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")


class InputError(ValueError):
    """The input breaks one of the limits, or is not YAML; the message says which and where."""


class _Resolver(yaml.resolver.Resolver):
    """kubectl's scalar types (see the module docstring); no timestamps, no base 60."""


_Resolver.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
        ("tag:yaml.org,2002:bool", _BOOL, "yYnNtTfFoO"),
        ("tag:yaml.org,2002:int", _INT, "-+0123456789"),
        ("tag:yaml.org,2002:float", _FLOAT, "-+0123456789."),
        ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
        ("tag:yaml.org,2002:merge", re.compile(r"^(?:<<)$"), ["<"])):
    _Resolver.add_implicit_resolver(_tag, _regexp, list(_first))


class _Limits:
    """The limits, shared by both loaders: values and depth counted while composing, no key twice."""

    json_keys = True

    def _init_limits(self) -> None:
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 — PyYAML's signature
        event = self.peek_event()  # type: ignore[attr-defined]
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise InputError(f"line {event.start_mark.line + 1}: more than {MAX_NODES} values")
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise InputError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)  # type: ignore[misc]
        finally:
            if nested:
                self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.value != "<<":
                key = self.construct_object(key_node)  # type: ignore[attr-defined]
                if key in seen:
                    raise InputError(f"line {key_node.start_mark.line + 1}: key {key!r} is given twice in one mapping")
                seen.add(key)
        mapping = super().construct_mapping(node, deep=deep)  # type: ignore[misc]
        # JSON keys are strings: kubectl writes a key read as true, 1 or null as "true", "1", "null".
        return {_json_key(k): v for k, v in mapping.items()} if self.json_keys else dict(mapping)


class _Loader(_Limits, yaml.composer.Composer, _yaml.CParser, yaml.constructor.SafeConstructor,
              _Resolver):
    """kubectl's types. Events come from libyaml (``_yaml.CParser``: ten times faster than PyYAML's own
    scanner on a 1.5 MiB list, which took 8 s to refuse under load), composed in Python so that
    the limits count every value as it arrives."""

    def __init__(self, stream: str):
        _yaml.CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        _Resolver.__init__(self)
        self._init_limits()

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = node.value.replace("_", "")
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        if len(digits) > 4300:
            raise InputError(f"line {node.start_mark.line + 1}: an integer of {len(digits)} digits")
        if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
            return sign * int(digits, 8)  # YAML 1.1 / Go: a leading 0 is octal
        return sign * int(digits, 0)

    def construct_yaml_float(self, node: ScalarNode) -> float | int:
        text = node.value.replace("_", "").lower()
        if len(text) > 4300:
            raise InputError(f"line {node.start_mark.line + 1}: a number of {len(text)} characters")
        value = {".inf": math.inf, "+.inf": math.inf, "-.inf": -math.inf, ".nan": math.nan}.get(text)
        if value is None:
            value = float(text)
        # JSON has one number type: kubectl sends 4096.0 as 4096, which an integer field accepts.
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) < 2**63 else value


# PyYAML's stubs accept only its own loader classes here (type-var), not a composed one.
_Loader.add_constructor("tag:yaml.org,2002:bool",
                        lambda loader, node: node.value.lower() in ("y", "yes", "true", "on"))
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)  # type: ignore[type-var]
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)  # type: ignore[type-var]


class _PlainLoader(_Limits, yaml.composer.Composer, _yaml.CParser, yaml.constructor.SafeConstructor,
                   yaml.resolver.Resolver):
    """PyYAML's own ``safe_load`` types (what srtctl reads a recipe with) under the same limits."""

    json_keys = False

    def __init__(self, stream: str):
        _yaml.CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._init_limits()


def _json_key(key: Any) -> Any:
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key) if isinstance(key, (int, float)) else key


def _expanded_size(node: Node, sizes: dict[int, int], open_: set[int]) -> int:
    """Values in ``node`` with every alias expanded (each shared node is measured once)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise InputError(f"line {node.start_mark.line + 1}: an alias refers to a value that contains it")
    open_.add(key)
    size = 1
    if isinstance(node, SequenceNode):
        size += sum(_expanded_size(n, sizes, open_) for n in node.value)
    elif isinstance(node, MappingNode):
        size += sum(_expanded_size(k, sizes, open_) + _expanded_size(v, sizes, open_) for k, v in node.value)
    open_.discard(key)
    if size > MAX_NODES:
        raise InputError(f"more than {MAX_NODES} values once its aliases are expanded")
    sizes[key] = size
    return size


def load_documents(text: str, kubectl: bool = True) -> list[Any]:
    """The non-empty documents of ``text``, read as kubectl reads them (``kubectl``; else with
    PyYAML's ``safe_load`` types: a recipe, as srtctl reads it), under the limits above either way.
    Raises :class:`InputError`."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise InputError(f"{size} bytes is more than the {MAX_BYTES} an API server stores in one object")
    docs: list[Any] = []
    try:
        # The reader checks the characters in its constructor (a C1 control character is refused there).
        loader = _Loader(text) if kubectl else _PlainLoader(text)
    except yaml.YAMLError as e:
        raise InputError(" ".join(f"not valid YAML: {e}".replace('"<unicode string>", ', "").split())) from None
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _expanded_size(node, {}, set())
            doc = loader.construct_document(node)
            if doc:
                docs.append(doc)
    except yaml.YAMLError as e:
        if "maximum nesting depth" in str(e):  # libyaml's own bound, met while it reads ahead
            raise InputError(f"nested deeper than {MAX_DEPTH} levels") from None
        raise InputError(" ".join(f"not valid YAML: {e}".replace('"<unicode string>", ', "").split())) from None
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 — any other constructor failure is bad input, not a crash
        raise InputError(f"not a value qdd can read: {type(e).__name__}: {e}") from None
    finally:
        loader.dispose()
    return docs


def _json_depth(doc: Any, limit: int) -> None:
    """Raise :class:`InputError` when ``doc`` nests deeper than ``limit`` (level by level over the
    containers only: no recursion)."""
    level, depth = ([doc] if isinstance(doc, dict | list) else []), 0
    while level:
        depth += 1
        if depth > limit:
            raise InputError(f"nested deeper than {limit} levels")
        nxt: list[Any] = []
        for v in level:
            nxt += [x for x in (v.values() if isinstance(v, dict) else v) if isinstance(x, dict | list)]
        level = nxt


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not a JSON number (write a finite number)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"{text[:40]} is out of range (a finite number is required)")
    return value


def load_json(text: str, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``text`` as JSON, read with the same limits as YAML: at most ``max_bytes`` bytes (UTF-8),
    nested at most ``max_depth`` levels (Python's parser stops at its recursion limit, ~1,000, with
    RecursionError; the rest is measured after), finite numbers only (no NaN/Infinity, no 1e999), integers of at
    most 4,300 digits. The one reader of JSON that comes from outside (a router's answer, a
    benchmark pod's termination message, a results file). Raises :class:`InputError`."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InputError(f"{size} bytes is more than the {max_bytes} accepted here")
    try:
        doc = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except InputError:
        raise
    except RecursionError:
        raise InputError(f"nested deeper than {max_depth} levels") from None
    except ValueError as e:
        raise InputError(f"not JSON: {e}") from None
    _json_depth(doc, max_depth)
    return doc
