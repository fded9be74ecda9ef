"""The one content hash qdd labels and annotates with: the revision of an endpoint's pods and of a
preflight pair's Jobs (``qdd.dev/revision``), and the manifest last applied to a child
(``qdd.dev/applied-hash``). Stable across processes and qdd versions: SHA-256 of canonical JSON
(sorted keys, no spaces), so an operator upgrade that renders the same objects rolls nothing."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def content_hash(value: Any, length: int) -> str:
    """The first ``length`` hex digits of the SHA-256 of ``value``'s canonical JSON."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:length]
