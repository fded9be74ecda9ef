#!/usr/bin/env bash
# The KV-transfer preflight between two GPUs of one host, as two processes: serve on GPU 0, fetch
# on GPU 1 (which also sees GPU 0, for the torch peer copy measured in the same run).
#   bash bench/nixl-h200x2.sh [final|explore|all]
# final:   the reported runs — nvlink (UCX picks its transports) and tcp_only (UCX_TLS=tcp,cuda_copy),
#          Qwen3.5-397B bf16-KV seed request; plus the seed plan's own fp8-KV layout, cuMemCreate
#          (vmm) memory, and the serve-side push with NIXL's UCX scatter-gather offload;
# explore: every variant in bench/variants-explore.json (agents, threads, workers, chunks, ops), swept
#          in one fetch process by bench/preflight_sweep.py (the Job itself measures one configuration).
# Needs python3 with torch and nixl (wheels under .whl/ are installed to a scratch dir first).
# Writes <name>.json results and bench-logs.tgz to $OUT (default bench/out), then
# bench/combine.py builds nixl-preflight-h200x2.json there.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-final}
PY=${PYTHON:-python3}
OUT=${OUT:-bench/out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" .whl/*.whl || exit 1
  export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD/operator/src:$PYTHONPATH" PYTHONUNBUFFERED=1
# NVLink multicast stays off on shared hosts (device README).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi topo -m > "$WORK/topo.txt" 2>&1
nvidia-smi nvlink -s > "$WORK/nvlink.txt" 2>&1
cat "$WORK/topo.txt"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv > "$WORK/gpus.csv" 2>&1
PORT=5600
DEVICE=${DEVICE:-cuda}   # cpu: a dry run of the protocol over host memory, no GPU needed
EXTRA=${EXTRA:-}         # more args for both sides, e.g. --bulk-bytes 4194304

# pair NAME LAYOUT "ENV" "SERVE ARGS" "FETCH ARGS"
pair() {
  local name=$1 layout=$2 envs=$3 sargs=$4 fargs=$5
  PORT=$((PORT + 10))
  echo "== $name ($envs) serve[$sargs] fetch[$fargs]"
  env $envs CUDA_VISIBLE_DEVICES=0 timeout 300 $PY -m qdd.preflight serve --layout "$layout" --gpu 0 \
    --device $DEVICE --port $PORT --timeout 280 $EXTRA $sargs >"$WORK/$name.serve.json" 2>"$WORK/$name.serve.log" &
  local spid=$!
  env $envs CUDA_VISIBLE_DEVICES=0,1 timeout 300 $PY bench/preflight_sweep.py --layout "$layout" --gpu 1 \
    --device $DEVICE $EXTRA --peer-src 0 --server-host 127.0.0.1 --server-port $PORT --ucx-log "$WORK/$name.ucx.log" $fargs \
    >"$WORK/$name.json" 2>"$WORK/$name.fetch.log"
  echo "   fetch rc=$?"
  wait $spid; echo "   serve rc=$?"
  cp "$WORK/$name.json" "$OUT/$name.json"
}

REPORTED="--num-threads 4 --split-batch-size 1"   # = the first entry of bench/variants-final.json
BF16=${BF16:-bench/layouts/qwen35-397b-bf16kv.json}
SEED=${SEED:-bench/layouts/qwen35-397b-seed-plan.json}
if [ "$MODE" = explore ] || [ "$MODE" = all ]; then
  pair explore "$BF16" "" "" "--peer-copy pull --variants @bench/variants-explore.json --reps 15"
  pair explore-push-t8 "$BF16" "" "--num-threads 8 --split-batch-size 1" \
    "--peer-copy off --variants @bench/variants-push.json --reps 15"
  pair explore-sgl "$BF16" "NIXL_UCX_SGL_ENABLE=1" "" "--peer-copy off --variants @bench/variants-sgl.json --reps 15"
fi
if [ "$MODE" = final ] || [ "$MODE" = all ]; then
  pair nvlink "$BF16" "" "" "--variants @bench/variants-final.json"
  pair tcp_only "$BF16" "UCX_TLS=tcp,cuda_copy" "" "$REPORTED --warmup 1 --reps 5 --budget-s 15"
  pair seed_plan "$SEED" "" "" "$REPORTED"
  # Memory from cuMemCreate (FABRIC handles where granted, as multi-node NVLink needs) on both sides.
  pair nvlink_vmm "$BF16" "" "--alloc vmm" "--alloc vmm $REPORTED"
  # The push alternative: serve WRITEs (NIXL's UCX scatter-gather offload) into fetch, same direction.
  pair push_sgl "$BF16" "NIXL_UCX_SGL_ENABLE=1" "--num-threads 4 --split-batch-size 1" \
    "--peer-copy off --variants @bench/variants-push-sgl.json"
  $PY bench/combine.py "$OUT" "bash bench/nixl-h200x2.sh $MODE" || true
fi
tar -czf "$OUT/bench-logs.tgz" -C "$WORK" --exclude site . 2>/dev/null
$PY bench/summarize.py "$OUT"/*.json
