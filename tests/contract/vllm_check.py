"""Check `vllm serve` argvs and env names against vLLM's own CLI parser and env registry.

Run with the vLLM venv's python (.qdd/vllm-venv/bin/python, built by
hack/vllm-parser-venv.sh), usually through tests/contract/vllm_harness.py. Reads one JSON
object on stdin, prints one JSON object on stdout (all library logging goes to stderr).

Input:
  {"argvs": [{"id": "decode-leader", "argv": ["nvidia/Qwen3.5-397B-A17B-NVFP4", "-tp", "1"]}],
   "env": ["VLLM_SSM_CONV_STATE_LAYOUT", ...]        # names, or {"NAME": "value", ...}
   "options": ["--gdn-prefill-backend", ...],         # optional: describe these flags
   "engine_config": false}                            # optional: see below
  "argvs" may also be a mapping {id: argv}. Each argv is what follows `vllm serve`.

Output:
  {"vllm_version": "0.33.0", "platform": "cpu",
   "argv": {"<id>": {"ok": true, "args": {...}, "launch": {...}, "warnings": [...]}
                  | {"ok": false, "stage": "parse"|"validate"|"launch", "error": "..."}},
   "unknown_env": [...], "env_values": {...}, "options": {...}, "seconds": {...}}

What is checked, in the order `vllm serve` does it (vllm/entrypoints/cli/main.py:main):
  1. parse: a top-level FlexibleArgumentParser with a "serve" subparser built by
     ServeSubcommand.subparser_init (vllm/entrypoints/cli/serve.py), which calls
     vllm.entrypoints.common.cli_args.make_arg_parser. The argv is parsed as ["serve", *argv], so
     FlexibleArgumentParser.parse_args' serve-specific handling (--model relocation, the
     "--served-model-name without a positional model" error, --config YAML, dotted
     --x.y=z JSON args, underscore/dash folding) applies. argparse errors exit 2: the message is
     captured from stderr. JSON-typed flags (e.g. --kv-transfer-config) are converted to their
     config classes here, so a bad kv_role already fails at this stage.
  2. validate: ServeSubcommand.validate -> validate_parsed_serve_args.
  3. launch: ServeSubcommand.cmd with the launchers stubbed out (run_headless,
     run_multi_api_server, run_dp_supervisor, run_server/uvloop.run): catches its cross-flag
     errors (--api-server-count with --headless, two DP load-balancing modes, and
     run_headless's --data-parallel-hybrid-lb check) and reports the launch mode
     ("single_api_server", "multi_api_server", "headless", "dp_supervisor") and the
     api_server_count vLLM would use.
  "args" is the parsed namespace after stage 1 (before cmd() mutates it), JSON-able. Values
  whose defaults come from the current platform (e.g. kv_transfer_config.kv_buffer_device,
  "cpu" here, "cuda" on a GPU node) reflect this CPU machine.

engine_config (opt-in, ~1-3 s per argv): builds AsyncEngineArgs.from_cli_args(...)
  .create_engine_config() for each argv that passed, with the positional model replaced by a
  local stand-in directory holding only a Qwen3.5-397B-A17B-shaped config.json (no weights, no
  quantization_config), --skip-tokenizer-init, and HF_HUB_OFFLINE=1. This runs vLLM's config
  validation (ParallelConfig, VllmConfig, KVTransferConfig, ...) and so catches cross-flag
  errors such as data_parallel_size_local > data_parallel_size. It runs on vLLM's CPU platform:
  platform-derived values in the result (async scheduling, max_num_seqs, capture sizes, block
  size) are the CPU platform's, NOT what a GB200 would use, and GPU-only checks do not run.
  Pass "engine_config": {"config_json": {...}} to use another stand-in config, and
  {"mamba_state": true} to also report the GDN state shape the model class plans
  (result["engine_config"][id]["model"]["mamba_state_shape"]; resolving the class costs seconds).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import io
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any

# Qwen3.5-397B-A17B text dimensions (docs/facts/memory-model.md); the vision tower is shrunk:
# --language-model-only skips it, and only the architecture's config shape matters here.
STAND_IN_CONFIG: dict[str, Any] = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text",
        "vocab_size": 248320,
        "hidden_size": 4096,
        "num_hidden_layers": 60,
        "full_attention_interval": 4,
        "num_attention_heads": 32,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 64,
        "moe_intermediate_size": 1024,
        "shared_expert_intermediate_size": 1024,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "max_position_embeddings": 262144,
        "mtp_num_hidden_layers": 1,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
        "dtype": "bfloat16",
    },
    "vision_config": {
        "model_type": "qwen3_5_moe_vision",
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "out_hidden_size": 4096,
    },
    "tie_word_embeddings": False,
    "dtype": "bfloat16",
}


def jsonable(v: Any, depth: int = 0) -> Any:
    """Best-effort conversion of parsed values (config dataclasses, enums, ...) to JSON."""
    if depth > 12:
        return repr(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, enum.Enum):
        return jsonable(v.value, depth + 1)
    if isinstance(v, dict):
        return {str(k): jsonable(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x, depth + 1) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((jsonable(x, depth + 1) for x in v), key=repr)
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        out = {}
        for f in dataclasses.fields(v):
            try:
                out[f.name] = jsonable(getattr(v, f.name), depth + 1)
            except Exception as e:  # noqa: BLE001 - a property that fails to compute
                out[f.name] = f"<error: {e}>"
        return out
    dump = getattr(v, "model_dump", None)
    if callable(dump):
        with contextlib.suppress(Exception):
            return dump(mode="json")
    if callable(v):
        return f"<callable {getattr(v, '__qualname__', repr(v))}>"
    return repr(v)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.messages.append(f"{record.levelname}: {record.getMessage()}")


def _argparse_error(stderr_text: str) -> str:
    lines = [ln for ln in stderr_text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ": error: " in ln:
            return ln.split(": error: ", 1)[1].strip()
    return lines[-1].strip() if lines else "argparse exited without a message"


def main() -> int:
    t0 = time.monotonic()
    # Keep stdout for our JSON alone: vLLM logs to stdout by default.
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    req = json.load(sys.stdin)

    # Without it vLLM finds no platform on a machine without GPUs ("Failed to infer device
    # type" while building the parser): the CPU platform plugin keys on it.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm
    import vllm.entrypoints.cli.serve as serve_mod
    import vllm.envs as envs
    import vllm.logger as vllm_logger
    from vllm.platforms import current_platform
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    t_import = time.monotonic() - t0

    # Build the parser the way `vllm serve` does (vllm/entrypoints/cli/main.py:main).
    top = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    serve_cmd = serve_mod.ServeSubcommand()
    serve_parser = serve_cmd.subparser_init(subparsers)
    serve_parser.set_defaults(dispatch_function=serve_cmd.cmd)
    t_build = time.monotonic() - t0 - t_import

    records = _Records()
    logging.getLogger("vllm").addHandler(records)

    def reset_once_caches() -> None:
        for name in ("_print_warning_once", "_print_info_once", "_print_error_once"):
            fn = getattr(vllm_logger, name, None)
            if fn is not None and hasattr(fn, "cache_clear"):
                fn.cache_clear()

    # Stub the launchers that ServeSubcommand.cmd dispatches to.
    launched: dict[str, Any] = {}

    def stub(mode: str):
        def f(args, *a, **k):
            launched["mode"] = mode
            launched["api_server_count"] = getattr(args, "api_server_count", None)
            return None

        return f

    class _UVLoop:
        @staticmethod
        def run(coro, *a, **k):
            with contextlib.suppress(Exception):
                coro.close()
            return None

    def _run_server(args, *a, **k):
        launched["mode"] = "single_api_server"
        launched["api_server_count"] = 1  # cmd() sets it to None just before run_server

        async def _noop():
            return None

        return _noop()

    def _run_headless(args, *a, **k):
        # The one argv-only check of vllm/entrypoints/cli/serve.py:run_headless (the others
        # follow create_engine_config; see engine_config).
        if getattr(args, "data_parallel_hybrid_lb", False):
            raise ValueError("data_parallel_hybrid_lb is not applicable in headless mode")
        return stub("headless")(args)

    serve_mod.run_headless = _run_headless
    serve_mod.run_multi_api_server = stub("multi_api_server")
    serve_mod.run_dp_supervisor = stub("dp_supervisor")
    serve_mod.run_server = _run_server
    serve_mod.uvloop = _UVLoop

    argvs = req.get("argvs", [])
    if isinstance(argvs, dict):
        argvs = [{"id": k, "argv": v} for k, v in argvs.items()]

    results: dict[str, Any] = {}
    parsed: dict[str, Any] = {}
    for item in argvs:
        aid, argv = str(item["id"]), [str(a) for a in item["argv"]]
        reset_once_caches()
        records.messages = []
        res: dict[str, Any]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = top.parse_args(["serve", *argv])
        except SystemExit as e:
            res = {"ok": False, "stage": "parse", "exit_code": e.code,
                   "error": _argparse_error(err.getvalue()), "stderr": err.getvalue()[-4000:]}
        except Exception as e:  # noqa: BLE001 - vLLM raises ValueError from parse_args
            res = {"ok": False, "stage": "parse", "error": f"{type(e).__name__}: {e}"}
        else:
            args_json = {k: jsonable(v) for k, v in sorted(vars(ns).items())
                         if k != "dispatch_function"}
            res = {"ok": True, "args": args_json}
            stage = "validate"
            try:
                serve_cmd.validate(ns)
                stage = "launch"
                launched.clear()
                work = copy.copy(ns)
                serve_cmd.cmd(work)
                res["launch"] = dict(launched)
                parsed[aid] = ns
            except SystemExit as e:
                res = {"ok": False, "stage": stage, "exit_code": e.code, "error": str(e),
                       "args": args_json}
            except Exception as e:  # noqa: BLE001
                res = {"ok": False, "stage": stage, "error": f"{type(e).__name__}: {e}",
                       "args": args_json}
        res["warnings"] = list(records.messages)
        results[aid] = res
    t_parse = time.monotonic() - t0 - t_import - t_build

    # Env names (and optionally values) against vllm.envs.environment_variables.
    registry = envs.environment_variables
    env_in = req.get("env", [])
    env_names = list(env_in.keys()) if isinstance(env_in, dict) else list(env_in)
    unknown_env = sorted({n for n in env_names if n not in registry})
    env_values: dict[str, Any] = {}
    if isinstance(env_in, dict):
        for name, value in env_in.items():
            if name not in registry:
                continue
            old = os.environ.get(name)
            os.environ[name] = str(value)
            try:
                env_values[name] = {"ok": True, "value": jsonable(registry[name]())}
            except Exception as e:  # noqa: BLE001
                env_values[name] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            finally:
                if old is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = old

    # Flag descriptions straight from the serve parser.
    # _option_string_actions also holds hidden spellings: vLLM's EnableDisableAction
    # (utils/argparse_utils.py) shows --enable-x/--disable-x in help and keeps --no-enable-x
    # registered but hidden.
    by_opt: dict[str, Any] = dict(serve_parser._option_string_actions)
    options: dict[str, Any] = {}
    for opt in req.get("options", []):
        a = by_opt.get(opt)
        if a is None:
            options[opt] = {"exists": False}
            continue
        options[opt] = {
            "exists": True,
            "dest": a.dest,
            "option_strings": list(a.option_strings),  # the spellings help shows
            "all_option_strings": sorted(k for k, v in by_opt.items() if v is a),
            "hidden": opt not in a.option_strings,
            "default": jsonable(a.default),
            "choices": jsonable(list(a.choices)) if a.choices is not None else None,
            "nargs": jsonable(a.nargs),
            "takes_value": a.nargs != 0,
            "help": next((ln.strip() for ln in str(a.help or "").splitlines() if ln.strip()), ""),
        }

    engine: dict[str, Any] = {}
    ec = req.get("engine_config")
    if ec:
        engine = _engine_configs(parsed, ec if isinstance(ec, dict) else {}, records,
                                 reset_once_caches)
    t_engine = time.monotonic() - t0 - t_import - t_build - t_parse

    out = {
        "vllm_version": vllm.__version__,
        "platform": current_platform.device_type,
        "argv": results,
        "unknown_env": unknown_env,
        "env_values": env_values,
        "options": options,
        "seconds": {"import": round(t_import, 2), "build_parser": round(t_build, 2),
                    "parse": round(t_parse, 2), "engine_config": round(t_engine, 2),
                    "total": round(time.monotonic() - t0, 2)},
    }
    if ec:
        out["engine_config"] = engine
    real_stdout.write(json.dumps(out, sort_keys=True))
    real_stdout.write("\n")
    real_stdout.flush()
    return 0


def _model_numbers(cfg, with_state: bool = False) -> dict[str, Any]:
    """What vLLM's ModelConfig reads from the config.json: layers, heads, head size, vocabulary, the
    hybrid block size it chose (each read defensively: a failing getter is reported, not raised)."""
    mc, text = cfg.model_config, cfg.model_config.hf_text_config
    getters = {
        "num_hidden_layers": lambda: text.num_hidden_layers,
        "total_num_kv_heads": mc.get_total_num_kv_heads,
        "head_size": mc.get_head_size,
        "vocab_size": mc.get_vocab_size,
        "hidden_size": mc.get_hidden_size,
        "linear_num_value_heads": lambda: text.linear_num_value_heads,
        "is_hybrid": lambda: mc.is_hybrid,
        "block_size": lambda: cfg.cache_config.block_size,
    }
    if with_state:  # opt-in: resolving the model class inspects it in a subprocess (seconds per argv)
        getters["mamba_state_shape"] = lambda: _mamba_state_shape(cfg)
    out: dict[str, Any] = {}
    for k, get in getters.items():
        try:
            out[k] = jsonable(get())
        except Exception as e:  # noqa: BLE001
            out[k] = f"<error: {e}>"
    return out


def _mamba_state_shape(cfg) -> Any:
    """The (conv, temporal) GDN state shape the model class plans per request — with the speculative
    widening when the class passes num_speculative_tokens (vllm#57721 is about classes that do not)."""
    from vllm.model_executor.models.registry import ModelRegistry

    model_cls, _ = ModelRegistry.resolve_model_cls(cfg.model_config.architectures, cfg.model_config)
    return model_cls.get_mamba_state_shape_from_config(cfg)


def _engine_configs(parsed, opts, records, reset_once_caches) -> dict[str, Any]:
    import vllm
    from vllm.usage.usage_lib import UsageContext

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    stand_in = tempfile.mkdtemp(prefix="qdd-stand-in-")
    with open(os.path.join(stand_in, "config.json"), "w") as f:
        json.dump(opts.get("config_json") or STAND_IN_CONFIG, f)

    out: dict[str, Any] = {}
    for aid, ns in parsed.items():
        reset_once_caches()
        records.messages = []
        args = copy.copy(ns)
        args.model = stand_in
        args.model_tag = stand_in
        args.tokenizer = None
        args.skip_tokenizer_init = True
        try:
            ea = vllm.AsyncEngineArgs.from_cli_args(args)
            cfg = ea.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER,
                                          headless=bool(getattr(ns, "headless", False)))
            pc, sc, cc = cfg.parallel_config, cfg.scheduler_config, cfg.cache_config
            comp = cfg.compilation_config
            res = {
                "ok": True,
                "parallel": {k: jsonable(getattr(pc, k, None)) for k in (
                    "tensor_parallel_size", "data_parallel_size", "data_parallel_size_local",
                    "data_parallel_rank", "data_parallel_master_ip", "data_parallel_rpc_port",
                    "enable_expert_parallel", "all2all_backend", "data_parallel_hybrid_lb",
                    "data_parallel_external_lb")},
                "scheduler": {k: jsonable(getattr(sc, k, None)) for k in (
                    "max_num_seqs", "max_num_batched_tokens", "async_scheduling",
                    "stream_interval", "enable_chunked_prefill")},
                "cache": {k: jsonable(getattr(cc, k, None)) for k in (
                    "block_size", "enable_prefix_caching", "mamba_cache_mode",
                    "mamba_ssm_cache_dtype", "mamba_cache_dtype", "cache_dtype",
                    "gpu_memory_utilization")},
                "compilation": {k: jsonable(getattr(comp, k, None)) for k in (
                    "max_cudagraph_capture_size", "cudagraph_capture_sizes")},
                "kv_transfer": jsonable(cfg.kv_transfer_config),
                "speculative": None if cfg.speculative_config is None else {
                    "method": cfg.speculative_config.method,
                    "num_speculative_tokens": cfg.speculative_config.num_speculative_tokens,
                    "draft_architectures": jsonable(getattr(getattr(cfg.speculative_config, "draft_model_config", None),
                                                            "architectures", None)),
                    "uniform_decode_query_len": cfg.uniform_decode_query_len},
                "model": {"architectures": jsonable(cfg.model_config.architectures),
                          "max_model_len": cfg.model_config.max_model_len,
                          **_model_numbers(cfg, bool(opts.get("mamba_state")))},
            }
        except Exception as e:  # noqa: BLE001
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        res["warnings"] = list(records.messages)
        out[aid] = res
    shutil.rmtree(stand_in, ignore_errors=True)
    return out


if __name__ == "__main__":
    rc = main()
    sys.stderr.flush()
    # Skip interpreter teardown (torch/vLLM atexit work costs 1-2 s); stdout is flushed.
    os._exit(rc)
