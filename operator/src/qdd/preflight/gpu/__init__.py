"""The KV-transfer preflight's GPU program (serve, fetch), apart from the operator: it imports only
the contract modules :mod:`qdd.preflight.layout`, :mod:`qdd.preflight.result` and
:mod:`qdd.preflight.ucx`, and nixl/torch inside functions."""
