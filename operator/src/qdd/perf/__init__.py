"""Performance model: what a QwenDisaggDeployment's topology will serve, before it runs.

- ``profile``: the profile type (latency against load per role and endpoint), its queries and its
  calibration by benchmark results. Pure (pydantic only): what a running operator reads.
- ``aic``: the one adapter to NVIDIA's aiconfigurator (the optional ``perf`` extra); nothing else
  in qdd imports it.
- ``predict``, ``sizing``: a deployment's prediction and the SLO search, built on the adapter.

Importing this package imports nothing heavy: the adapter loads the library on first use.
"""
