"""The engine pods' probes against real vLLM engines (CPU build): what /health says while an engine
starts and once it serves, and how a refused flag ends the process (docs/reliability.md#engine-probes,
docs/facts/engine-startup.md). One engine pair at a time: this module starts its own, after
test_pd.py's has stopped."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .deployment import SERVED, engine_container, rendered, tiny_cr
from .engines import Engine, engine_launch, free_port, post_json
from .pair import start_pair


def _probes(role: str) -> dict:
    c = engine_container(rendered(tiny_cr()), role)
    return {k: c[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}


def test_health_is_refused_until_the_engine_serves_then_a_completion_succeeds_at_once(cpu_venv, checkpoint, logs):
    """What the startup and readiness probes see: connection refused (the API server does not listen
    before weights, compile and graphs are done), never an HTTP answer other than 200; the first 200
    means serving: a completion sent right then succeeds. The start is far inside the rendered budget."""
    # Both engines polled from their launch, side by side: waiting for one after the other let the
    # second finish starting unobserved (its first /health was already 200 on a loaded machine).
    pair = start_pair(cpu_venv, checkpoint, logs, wait=False)
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda e: e.wait_ready(), (pair.prefill, pair.decode)))
        for e in (pair.prefill, pair.decode):
            seen = [a for _, a in e.health_seen]
            # before the first 200 no HTTP answer at all: refused (or, on a loaded machine, a timeout)
            assert seen[-1] == "200" and not [a for a in seen[:-1] if a.isdigit()], (e.name, seen)
            assert "refused" in seen[:-1], (e.name, seen)
            probe = _probes("prefill")["startupProbe"]
            budget = probe["periodSeconds"] * probe["failureThreshold"]
            assert e.ready_s is not None and e.ready_s < budget
            # the startup probe's failures before success, at its period: far from its threshold
            assert int(e.ready_s // probe["periodSeconds"]) + 1 < probe["failureThreshold"]
        status, body = post_json(pair.decode.base + "/v1/completions",
                                 {"model": SERVED, "prompt": "The prefill engine computes", "max_tokens": 4}, timeout=60)
        assert status == 200 and body["choices"][0]["text"], body
        print(f"\n/health refused for {pair.prefill.ready_s:.1f} s (prefill) and {pair.decode.ready_s:.1f} s (decode), "
              f"then 200; startup budget {budget} s")
    finally:
        pair.stop()


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
