"""A recipe's ``name`` → a QwenDisaggDeployment name, deterministically.

Published names are longer than qdd's 40 characters (``qwen35-397b-nvfp4-gb200-disagg-7xdep2-1xdep8-cc5120``
is 51; qdd.api.resource explains the limit). The shortening is a pure function of the recipe:

1. lowercase, anything but ``a-z0-9-`` → ``-``, a leading digit gets ``qdd-``;
2. if longer than 40: drop the ``-``-separated words the resource already states elsewhere — the
   precision (``model.precision``, e.g. ``nvfp4``; it is in the model name), the GPU type
   (``resources.gpu_type``, e.g. ``gb200``: spec.cluster.gpuType) and ``disagg`` (qdd deploys
   disaggregated P/D only). The Qwen3.5 GB200 set then reads ``qwen35-397b-7xdep2-1xdep8-cc5120``,
   the name of qdd's own example;
3. if still longer: the first words that fit in 31 characters, ``-`` and 8 hex digits of the SHA-256
   of the full name (two long names that share a start stay distinct).
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 40
"""qdd.api.resource's limit on metadata.name."""
RESTATED_WORDS = ("disagg",)
"""Words a recipe name carries that every qdd deployment already is."""


def _clean(raw: str) -> str:
    out = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw.lower())).strip("-")
    return out if out[:1].isalpha() else f"qdd-{out}"


def _drop(name: str, words: tuple[str, ...]) -> tuple[str, list[str]]:
    kept: list[str] = []
    dropped: list[str] = []
    for w in name.split("-"):
        (dropped if w in words else kept).append(w)
    return "-".join(kept), dropped


def _hashed(name: str) -> str:
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = ""
    for w in name.split("-"):
        if len(head) + len(w) + 1 > MAX_NAME - 9:
            break
        head = f"{head}-{w}" if head else w
    return f"{head or name[:MAX_NAME - 9]}-{digest}"


def cr_name(raw: str, precision: str | None = None, gpu_type: str | None = None) -> tuple[str, str]:
    """(name, how it was made) for a recipe ``name``; ``how`` is "" when the name is used as it is.

    ``precision`` and ``gpu_type`` are the recipe's ``model.precision`` and ``resources.gpu_type``
    (the words step 2 may drop). The result is a DNS-1035 label of at most 40 characters."""
    name = _clean(raw)
    if len(name) <= MAX_NAME:
        return name, "" if name == raw else f"made from {raw!r} (lowercase letters, digits and '-' only)"
    words = tuple(w.lower() for w in (precision, gpu_type) if w) + RESTATED_WORDS
    short, dropped = _drop(name, words)
    if len(short) <= MAX_NAME and short[:1].isalpha():
        return short, (f"made from {raw!r}: {len(name)} characters is over qdd's {MAX_NAME}, so the words "
                       f"{', '.join(dropped)} were dropped (the spec's model, cluster.gpuType and P/D say them)")
    hashed = _hashed(name)
    return hashed, (f"made from {raw!r}: {len(name)} characters is over qdd's {MAX_NAME}; the first words and 8 hex "
                    f"digits of its SHA-256")
