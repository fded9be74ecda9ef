"""The engine's "fixed in" and "has no effect on" facts (qdd.catalog.engine_facts) applied to a spec:
a P/D deployment whose engine version lacks a fix its shape needs is refused at
``spec.engine.vllmVersion`` (or rendered with the known workaround, said as a warning), and a setting
that does nothing on the P→D path is refused where it is set."""

from __future__ import annotations

from ..api.spec import QwenDisaggDeploymentSpec
from ..catalog.engine_facts import FIXES, FixFact, no_effect
from ..errors import FieldError

_NEEDS = {
    # Every qdd deployment is P/D of a hybrid (GDN + attention) model.
    "pd": lambda spec: True,
    "mtp": lambda spec: spec.speculative is not None,
}


def needed_fixes(spec: QwenDisaggDeploymentSpec) -> list[FixFact]:
    """The fixes of the P/D path this spec's shape needs."""
    return [f for f in FIXES if _NEEDS[f.needed_by](spec)]


def workaround_args(spec: QwenDisaggDeploymentSpec, version: str) -> list[str]:
    """argv items of the workarounds rendered on every engine pod for the fixes ``version`` lacks."""
    v = version.removeprefix("v")
    return [a for f in needed_fixes(spec) if v not in f.in_versions and f.workaround for a in f.workaround_args]


def fix_problems(spec: QwenDisaggDeploymentSpec, version: str) -> tuple[list[FieldError], list[str]]:
    """(errors, warnings) for the fixes engine ``version`` lacks: refused, or the workaround said."""
    v = version.removeprefix("v")
    errors: list[FieldError] = []
    warnings: list[str] = []
    for f in needed_fixes(spec):
        if v in f.in_versions:
            continue
        have = ", ".join(sorted(f.in_versions))
        if f.workaround:
            warnings.append(f"vLLM {v} lacks {f.pr} ({f.issue}): {f.failure}; rendered with the workaround: {f.workaround}")
        else:
            errors.append(FieldError("spec.engine.vllmVersion",
                                     f"vLLM {v} lacks {f.pr} (fixes {f.issue}): {f.failure}. Use an engine that has it "
                                     f"(profiles: {have})"))
    return errors, warnings


def kv_extra_problem(key: str, version: str) -> str | None:
    """Why a kv_connector_extra_config key does nothing on P→D for this engine, or None."""
    fact = no_effect("kv-extra", key.split(".", 1)[0], version)
    if fact is None:
        return None
    return f"kv_connector_extra_config.{fact.name} has no effect on the P→D path of vLLM {version}: {fact.why} ({fact.source}); {fact.fix}"


def env_no_effect_problem(name: str, version: str) -> str | None:
    """Why an extraEnv name does nothing for this engine (though vLLM's registry may hold it), or None."""
    fact = no_effect("env", name, version)
    if fact is None:
        return None
    return f"{name} has no effect in vLLM {version}: {fact.why} ({fact.source}); {fact.fix}"
