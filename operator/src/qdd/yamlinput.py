"""Reading YAML that a user gives the CLI, with the limits an API server has: no input can make
``qdd`` hang or run out of memory before validation starts.

- at most :data:`MAX_BYTES` (1.5 MiB, etcd's default object size limit: nothing larger can be a
  custom resource);
- at most :data:`MAX_NODES` values once aliases are expanded (a "billion laughs" document of a
  few lines expands exponentially), and no alias that refers to a node containing itself;
- nesting at most :data:`MAX_DEPTH` levels (a QwenDisaggDeployment is 6 deep; deeper input
  would only reach Python's recursion limit).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import CollectionStartEvent
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_BYTES = 1_572_864
MAX_DEPTH = 64
MAX_NODES = 100_000


class InputError(ValueError):
    """The input breaks one of the limits, or is not YAML; the message says which and where."""


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 — PyYAML's signature
        event = self.peek_event()
        nested = isinstance(event, CollectionStartEvent)
        if nested:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise InputError(f"line {event.start_mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self._depth -= 1

    def compose_document(self) -> Any:  # noqa: ANN401
        node = super().compose_document()
        _expanded_size(node, {}, set())
        return node


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


def load_documents(text: str) -> list[Any]:
    """The non-empty documents of ``text``. Raises :class:`InputError`."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise InputError(f"{size} bytes is more than the {MAX_BYTES} an API server stores in one object")
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc]  # noqa: S506 — a SafeLoader
    except yaml.YAMLError as e:
        raise InputError(f"not valid YAML: {e}".replace('"<unicode string>", ', "")) from None
