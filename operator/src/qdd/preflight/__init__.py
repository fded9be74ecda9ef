"""KV-transfer preflight: prove the prefill→decode NIXL path before a deployment is called Ready.

The contract between the GPU program and the operator (stdlib only): :mod:`.layout` (the hybrid
cache as a transfer sees it), :mod:`.result` (the JSON facts a fetch reports and the termination
message), :mod:`.ucx` (reading UCX's transport choice).
The GPU program (``python -m qdd.preflight serve|fetch``): :mod:`.gpu` — program, serve, fetch,
run, wire, buffers; it imports only the contract (import-linter checks it), nixl and torch inside
functions, and reports facts.
The operator's side: :mod:`.planned` (a plan's layout; ``python -m qdd.preflight layout``),
:mod:`.names`, :mod:`.verdict` (the facts judged against the spec's thresholds →
``KVTransferReady``), :mod:`.observe` (live Jobs and pods → the condition). The Jobs are rendered
with the other manifests, by :mod:`qdd.render.preflight`.
"""
