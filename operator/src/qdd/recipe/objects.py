"""A recipe → the objects that reproduce it: the QwenDisaggDeployment and the QwenDisaggBenchmark of
its ``benchmark`` section, with the notes a user should read; and a directory of recipes.

- ``sa-bench`` → ``spec.sweep``: ``isl``, ``osl``, ``random_range_ratio``, every one of
  ``concurrencies`` (in order), ``num_prompts_mult`` → ``promptsPerConcurrency``, ``num_warmup_mult``
  → ``warmupsPerConcurrency``, ``req_rate`` (``inf`` = unset) → ``requestRate``.
- ``gsm8k`` → ``spec.accuracy``: ``num_examples`` → ``examples``, ``num_shots`` → ``shots``,
  ``repeat`` → ``repeats``; ``passThreshold`` is the seed's 0.88 (GSM8K 88 % on all five topologies,
  docs/facts/seed-recipe.md), said in a note.
The benchmark has the deployment's name (another kind: no clash) and points at it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import labels
from ..api import benchmark as api_bench
from ..errors import SpecError
from ..yamlinput import MAX_BYTES, InputError, load_documents
from .build import build
from .keys import GSM8K_KEYS, SA_BENCH_KEYS, RecipeError, _Build, _levels, _mapping, _num, _only, _pos

SEED_GSM8K_THRESHOLD = 0.88
"""The seed's GSM8K accuracy on every topology (docs/facts/seed-recipe.md), the gate of imported -acc recipes."""


@dataclass
class Imported:
    """What one recipe imports to. ``notes``: decisions the import made (a shortened name, kv_both, …)."""

    source: str
    deployment: dict[str, Any]
    benchmark: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)

    def objects(self) -> list[dict[str, Any]]:
        return [self.deployment, *([self.benchmark] if self.benchmark else [])]


def _rate(b: _Build, value: Any) -> float | None:
    if value is None or str(value).lower() in ("inf", "infinity"):
        return None
    rate = _num(value, float)
    if not isinstance(rate, float) or not math.isfinite(rate) or rate <= 0:
        b.error("benchmark.req_rate", f"{value!r}: a positive number of requests per second, or inf")
        return None
    return rate


def _sweep(b: _Build, bench: dict[str, Any]) -> dict[str, Any]:
    _only(b, bench, "benchmark", SA_BENCH_KEYS)
    levels = _levels(bench.get("concurrencies"))
    if bench.get("concurrencies") is None or not _pos(*levels):
        b.error("benchmark.concurrencies", "required: positive integers, a list or joined by 'x'")
    out = {"isl": _num(bench.get("isl"), int), "osl": _num(bench.get("osl"), int), "concurrencies": levels,
           "randomRangeRatio": _num(bench.get("random_range_ratio", 1.0), float),
           "promptsPerConcurrency": _num(bench.get("num_prompts_mult", 8), int),
           "warmupsPerConcurrency": _num(bench.get("num_warmup_mult", 1), int)}
    rate = _rate(b, bench.get("req_rate"))
    return out | ({"requestRate": rate} if rate is not None else {})


def _accuracy(b: _Build, bench: dict[str, Any]) -> dict[str, Any]:
    _only(b, bench, "benchmark", GSM8K_KEYS)
    out: dict[str, Any] = {"passThreshold": SEED_GSM8K_THRESHOLD}
    for key, f in (("num_examples", "examples"), ("num_shots", "shots"), ("repeat", "repeats")):
        if bench.get(key) is not None:
            out[f] = _num(bench[key], int)
    b.said.append(f"spec.accuracy.passThreshold {SEED_GSM8K_THRESHOLD}: the seed's GSM8K accuracy on every "
                  "topology (a recipe gives no threshold); edit it to gate on another")
    return out


_BENCH_FIELDS = {"sweep": {"isl": "isl", "osl": "osl", "concurrencies": "concurrencies",
                           "randomRangeRatio": "random_range_ratio", "promptsPerConcurrency": "num_prompts_mult",
                           "warmupsPerConcurrency": "num_warmup_mult", "requestRate": "req_rate"},
                 "accuracy": {"examples": "num_examples", "shots": "num_shots", "repeats": "repeat"}}


def _benchmark(b: _Build, recipe: dict[str, Any], deployment: str | None) -> dict[str, Any] | None:
    bench = _mapping(b, recipe.get("benchmark"), "benchmark")
    kind = {"sa-bench": "sweep", "gsm8k": "accuracy"}.get(str(bench.get("type")))
    if kind is None or deployment is None:
        return None  # the deployment's import already refused the type (or the name)
    known, before = {k for k, _ in b.errors}, len(b.errors)  # a key the deployment refused is not reported twice
    spec = {"deploymentName": deployment, kind: _sweep(b, bench) if kind == "sweep" else _accuracy(b, bench)}
    b.errors = b.errors[:before] + [e for e in b.errors[before:] if e[0] not in known]
    try:
        api_bench.parse_benchmark_spec(spec)
    except SpecError as e:
        for err in e.errors:
            last = err.field.split(".")[2] if err.field.count(".") >= 2 else ""
            key = _BENCH_FIELDS[kind].get(last.split("[")[0])
            if err.field != "spec.deploymentName" and (key is None or f"benchmark.{key}" not in known):
                b.error(f"benchmark.{key}" if key else "benchmark", f"{err.message} (as {err.field})")
    return {"apiVersion": f"{labels.GROUP}/{labels.VERSION}", "kind": api_bench.KIND,
            "metadata": {"name": deployment}, "spec": spec}


def import_objects(recipe: Any, name: str | None, image: str, source: str = "(recipe)") -> Imported:
    """The deployment and benchmark ``recipe`` describes (see :func:`qdd.recipe.import_recipe` for the
    deployment). Raises :class:`RecipeError` listing every problem of both."""
    cr, b = build(recipe, name, image)
    bench = _benchmark(b, recipe, cr["metadata"]["name"])
    if b.errors:
        raise RecipeError(b.errors)
    return Imported(source=source, deployment=cr, benchmark=bench, notes=list(b.said))


def read_recipe(path: Path) -> Any:
    """The one document of a recipe file, read with the CLI's limits (qdd.yamlinput: at most 1.5 MiB,
    64 levels, 100,000 values counted with aliases expanded, no alias into itself, no key twice) and
    PyYAML's own types, as srtctl reads it. Raises :class:`RecipeError` keyed ``(file)``."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    try:
        docs = load_documents(data.decode("utf-8"), kubectl=False)
    except UnicodeDecodeError as e:
        raise RecipeError([("(file)", f"not UTF-8 text (byte {data[e.start]:#04x} at offset {e.start}): save it as "
                                      "UTF-8")]) from None
    except InputError as e:
        raise RecipeError([("(file)", str(e))]) from None
    if len(docs) != 1:
        raise RecipeError([("(file)", f"{len(docs) or 'no'} YAML documents: a recipe is one document (a mapping with "
                                      "name, model, resources, backend, benchmark)")])
    return docs[0]


def recipe_files(directory: Path) -> list[Path]:
    """The recipes of ``directory`` (``*.yaml``/``*.yml``, not below it), sorted by name."""
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def import_directory(directory: Path, image: str) -> tuple[list[Imported], list[tuple[str, str, str]]]:
    """Every recipe of ``directory``: (imported, errors as (file, key, message)). Two recipes whose
    names shorten to the same name are both refused (an apply would overwrite one with the other)."""
    done: list[Imported] = []
    errors: list[tuple[str, str, str]] = []
    for path in recipe_files(directory):
        try:
            done.append(import_objects(read_recipe(path), None, image, source=str(path)))
        except RecipeError as e:
            errors += [(str(path), k, m) for k, m in e.errors]
    by_name: dict[str, list[Imported]] = {}
    for imp in done:
        by_name.setdefault(imp.deployment["metadata"]["name"], []).append(imp)
    clashes = {n: v for n, v in by_name.items() if len(v) > 1}
    for n, same in clashes.items():
        errors += [(i.source, "name", f"imports as {n!r}, as does {', '.join(o.source for o in same if o is not i)}; "
                                      "rename one recipe") for i in same]
    return [i for i in done if i.deployment["metadata"]["name"] not in clashes], errors
