"""KV-transfer preflight: prove the prefill→decode NIXL path before a deployment is called Ready.

Pure modules (importable by the operator, no nixl/torch): :mod:`.layout` (the hybrid cache as a
transfer sees it), :mod:`.verdict` (result → ``KVTransferReady`` condition), :mod:`.result` (the
JSON contract and the termination message), :mod:`.ucx` (reading UCX's transport choice),
:mod:`.names`, :mod:`.observe` (live Jobs and pods → the condition).
The program (``python -m qdd.preflight serve|fetch|layout``) lives in :mod:`.program`,
:mod:`.serve`, :mod:`.fetch`, :mod:`.run`, :mod:`.wire`, :mod:`.buffers`; those import nixl and
torch inside functions only. The Jobs are rendered with the other manifests, by
:mod:`qdd.render.preflight`; nothing here imports ``qdd.render``.
"""
