"""The one jinja2 environment every manifest template renders through, built so that no value
can change the structure of the YAML it lands in.

Every ``{{ expression }}`` passes through :func:`_finalize`: a scalar is written as a JSON
scalar (JSON is YAML, so a string with a newline, ``: ``, ``#``, quotes, ``{{ }}``, ``&``/``*``
or ``!!tag`` arrives as one double-quoted string), a list or mapping as one JSON flow
collection. The only way to emit YAML *text* is :class:`Block`, produced by the ``toyaml`` and
``tojson`` filters from data (PyYAML/JSON do the quoting). A template line therefore cannot
forget to quote: there is nothing to remember. The ``indent`` filter is replaced by one that
refuses, because jinja's would turn a :class:`Block` back into a plain string (write
``toyaml(4)`` instead); interpolating into part of a scalar (``nixl-{{ rank }}``) gives a
quoted fragment that breaks the document, which the golden tests catch — build the whole
value in the expression (``{{ "nixl-%d" % rank }}``).
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined

from ..labels import object_labels
from .placement import engine_affinity


_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has it. The text it writes is parsed again at once, so only what
it means matters, not its bytes."""


class Block(str):
    """YAML text made from data by a filter; the only string a template writes as it is."""


def _finalize(value: Any) -> str:
    if isinstance(value, Block):
        return value
    if value is None or isinstance(value, (bool, int, float, str)):
        return json.dumps(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    raise TypeError(f"a template interpolated a {type(value).__name__}; give it a scalar, a list or a mapping")


def toyaml(value: Any, indent: int = 0, sort: bool = True) -> Block:
    """Block YAML of ``value``; lines after the first indented by ``indent`` spaces (the first
    sits where the expression is)."""
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=False, sort_keys=sort, width=1 << 16).rstrip()
    return Block(text.replace("\n", "\n" + " " * indent))


def tojson(value: Any) -> Block:
    """One JSON scalar or flow collection (sorted keys)."""
    return Block(json.dumps(value, sort_keys=True))


def _no_indent(*_: Any, **__: Any) -> str:
    raise TypeError("use toyaml(N) rather than indent(N): indent returns unquoted text")


def environment(package: str) -> Environment:
    """The environment for the templates of ``package`` (a folder ``templates`` beside it)."""
    env = Environment(loader=PackageLoader(package, "templates"), undefined=StrictUndefined,
                      keep_trailing_newline=True, autoescape=False, finalize=_finalize)
    env.filters["toyaml"] = toyaml
    env.filters["tojson"] = tojson
    env.filters["indent"] = _no_indent
    return env


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser when PyYAML has it: ten times faster than the pure-Python one, same result."""


ENV = environment("qdd.render")
"""The one environment: engine, router, Service, ComputeDomain and preflight templates alike."""
ENV.globals["labels_of"] = object_labels
ENV.globals["engine_affinity"] = engine_affinity


def load_all(text: str) -> list[dict[str, Any]]:
    """The documents of a rendered template (empty ones dropped)."""
    return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc]


def load(text: str) -> Any:
    """The one document of a rendered template."""
    return yaml.load(text, Loader=_Loader)
