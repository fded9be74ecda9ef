"""Shared helpers for every test layer."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
BASE_EXAMPLES = sorted(p for p in EXAMPLES.glob("qwen35-397b-*xdep2-1xdep8.yaml"))
ALL_SEED_EXAMPLES = sorted(p for p in EXAMPLES.glob("qwen35-397b-*xdep2-1xdep8*.yaml") if "-mtp" not in p.name)
"""The seed's recipes (base, -cc4096, -cc5120); the MTP and Qwen3.8 examples are not the seed's."""


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.fixture
def seed_cr() -> dict[str, Any]:
    """A fresh copy of the seed CR (4 × DEP2 + 1 × DEP8, concurrency 4096)."""
    return copy.deepcopy(load(EXAMPLES / "qwen35-397b-4xdep2-1xdep8-cc4096.yaml"))
