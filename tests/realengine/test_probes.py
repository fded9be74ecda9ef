"""The engine pods' probes against real vLLM engines (CPU build): what /health says while an engine
starts and once it serves, and how a refused flag ends the process (docs/reliability.md#engine-probes,
docs/facts/engine-startup.md). The start is the package's shared pair's, watched from launch."""

from __future__ import annotations

import time
from pathlib import Path

from .deployment import engine_container, rendered, tiny_cr
from .engines import Engine, engine_launch, free_port


def _probes(role: str) -> dict:
    c = engine_container(rendered(tiny_cr()), role)
    return {k: c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}


def test_health_is_refused_until_the_engine_serves_then_a_completion_succeeds_at_once(pair):
    """What the startup and readiness probes see: connection refused (the API server does not listen
    before weights, compile and graphs are done), never an HTTP answer other than 200; the first 200
    means serving: a completion sent right then succeeds. The start is far inside the rendered budget.
    The package's pair was polled side by side from its launch (tests/realengine/conftest.py)."""
    probe = _probes("prefill")["startupProbe"]
    budget = probe["periodSeconds"] * probe["failureThreshold"]
    for e in (pair.prefill, pair.decode):
        seen = [a for _, a in e.health_seen]
        # before the first 200 no HTTP answer at all: refused (or, on a loaded machine, a timeout)
        assert seen[-1] == "200" and not [a for a in seen[:-1] if a.isdigit()], (e.name, seen)
        assert "refused" in seen[:-1], (e.name, seen)
        assert e.ready_s is not None and e.ready_s < budget
        # the startup probe's failures before success, at its period: far from its threshold
        assert int(e.ready_s // probe["periodSeconds"]) + 1 < probe["failureThreshold"]
    assert pair.launch is not None
    status, body = pair.launch.completion
    assert status == 200 and body["choices"][0]["text"], body
    print(f"\n/health refused for {pair.prefill.ready_s:.1f} s (prefill) and {pair.decode.ready_s:.1f} s (decode), "
          f"then 200; startup budget {budget} s")


def test_a_flag_vllm_refuses_ends_the_engine_with_status_2(cpu_venv, checkpoint, logs: Path):
    """The start-up crash the simulated kubelet plays (hack/cluster/engine_stages.py): status 2, some
    seconds in (the imports come before argparse), every time it is started."""
    c = engine_container(rendered(tiny_cr()), "prefill")
    c = {**c, "args": [*c["args"], "--no-such-flag"]}
    argv, env, _ = engine_launch(c, venv=cpu_venv, model_dir=checkpoint, port=free_port(),
                                 side_channel_port=free_port(), core=0)
    with Engine("refused", argv, env, logs / "refused.log", 0) as e:
        t0 = time.monotonic()
        rc = e.proc.wait(timeout=300)
        took = time.monotonic() - t0
        assert rc == 2, e.log_tail()
        assert "unrecognized arguments: --no-such-flag" in e.log_tail()
    print(f"\n`vllm serve --no-such-flag` exited 2 after {took:.1f} s")
