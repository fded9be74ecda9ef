"""The node-local weight cache's places and names (``spec.model.cache``; docs/cold-start.md#node-local-weight-cache). Pure.

Each tray's copy of a checkpoint lives in ``<root>/<namespace>/<digest hex>`` on the tray's own disk
(a hostPath; ``root`` is the operator's, never the spec's: a resource author cannot choose a host
path). One folder per namespace: the prefetch runs the author's engine image with write access to
the folder, and the engines' quick check trusts the folder's record, so a folder is shared only by
deployments of one namespace (one tenant), never across tenants. The prefetch pods (one per tray, a DaemonSet) fill it; each engine pod's init container
points ``/qdd-model/model`` at the verified copy or at the claim, and the engine serves that path.
"""

from __future__ import annotations

import re

DEFAULT_ROOT = "/var/lib/qdd/weights"
"""The trays' folder of all caches when the operator is not told another (chart value
``weightCache.hostPath``, operator environment ``QDD_WEIGHT_CACHE_ROOT``)."""
ROOT_PATTERN = re.compile(r"^/([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]+$")
"""An absolute path without ``..`` or empty elements (checked where the operator reads it)."""

CACHE_MOUNT = "/weight-cache"
"""This tray's cache folder of the digest, in the prefetch (read-write) and engine (read-only) pods."""
LINK_DIR = "/qdd-model"
"""An emptyDir of the engine pod holding the link the engine reads the model from."""
MODEL_LINK = f"{LINK_DIR}/model"
"""The engine's model argument with a weight cache: a link to ``/weight-cache/files`` or to the claim."""
PROGRAM_DIR = "/qdd-weight-cache"
"""Where the ConfigMap with qdd.weightcache's program is mounted."""
PROGRAM = f"{PROGRAM_DIR}/program.py"

CACHE_STATE = "qdd.dev/weight-cache"
"""Label the operator puts on each prefetch pod from its init container's result: ``verified``,
``fetching``, ``failed``. Engine pods prefer trays whose prefetch pod says ``verified``."""
DIGEST_LABEL = "qdd.dev/weights"
"""Label of prefetch pods: the first 32 hex digits of the digest (a label value holds at most 63)."""


def hex_of(digest: str) -> str:
    """The 64 hex digits of ``sha256:<hex>``."""
    return digest.split(":", 1)[1]


def digest_label(digest: str) -> str:
    return hex_of(digest)[:32]


def tray_folder(root: str, namespace: str, digest: str) -> str:
    """The hostPath of one namespace's cache of one digest on every tray (a namespace name is a DNS
    label: no ``/`` nor ``..``)."""
    return f"{root.rstrip('/')}/{namespace}/{hex_of(digest)}"
