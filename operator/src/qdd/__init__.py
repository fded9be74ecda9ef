"""qdd: prefill/decode disaggregated vLLM serving of Qwen3.5 on Kubernetes.

Layers (docs/facts/design-brief.md#2-architecture-a-pure-core-and-a-thin-shell): ``api`` → ``plan`` → ``render`` are pure (no kopf, no kubernetes
client); ``controller`` and ``cli`` do the I/O.
"""

__version__ = "0.1.0"
