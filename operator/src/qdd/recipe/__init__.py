"""``qdd import-recipe``: an srt-slurm recipe (docs/facts/recipes.md) → a QwenDisaggDeployment dict.

What goes where:

- ``resources``: ``prefill_workers``/``decode_workers`` → endpoints; ``gpus_per_prefill``/
  ``gpus_per_decode`` must equal the role's DP × TP; ``prefill_nodes``/``decode_nodes`` must
  hold the workers; ``gpu_type`` → ``cluster.gpuType`` (``gpus_per_node`` only where it differs
  from the GPU kind's). Aggregated recipes (``agg_*``) are refused: qdd deploys P/D only.
- ``backend.vllm_config.{prefill,decode}`` (srtctl's spelling: names without dashes, ``_`` or
  ``-``, ``true`` = bare flag, ``false``/``null`` = left out, lists = several values; a name is
  resolved as vLLM's parser resolves it, so ``async`` is ``async-scheduling``): topology flags →
  ``topology``; flags qdd has a field for → ``tuning`` (and ``servedModelName``, ``kvTransfer``);
  flags that restate what qdd always renders (``no-enable-prefix-caching``, ``generation-config
  vllm``, ``no-disable-hybrid-kv-cache-manager``) and flags srtctl or qdd set per process
  (``headless``, ``port``, DP local size/start rank/address/RPC port, hybrid or external LB) are
  dropped; every other flag goes to ``extraArgs`` as ``--flag [value…]``.
- ``backend.{prefill,decode}_environment``: variables qdd owns or renders are dropped
  (``VLLM_SSM_CONV_STATE_LAYOUT`` only as ``DS``), UCX settings → ``kvTransfer.ucx``,
  Dynamo-only (``DYN_*``, ``DYNAMO_*``) dropped, the rest → ``extraEnv``.
- ``benchmark`` (``sa-bench``): ``isl``, ``osl``, ``random_range_ratio`` and the highest of
  ``concurrencies`` → ``workload``.
- ``model.path`` ``hf:<org>/<name>`` → ``model.name``; the container is replaced by ``image``.
  Launcher-only sections (``slurm``, ``frontend``, ``dynamo``, …) are ignored.

Only what is about the recipe itself is checked here: unknown keys, values that cannot be read,
keys that contradict each other, settings qdd has no field for. Every value that lands in the
resource is then checked by qdd's own API and planner checks (:func:`qdd.api.parse_resource`,
:func:`qdd.plan.args.check_extra`), and each error they report is traced back to the recipe key
the field came from. :class:`RecipeError` carries every problem found, not just the first.
"""


from .build import import_recipe
from .keys import RecipeError

__all__ = ["RecipeError", "import_recipe"]
