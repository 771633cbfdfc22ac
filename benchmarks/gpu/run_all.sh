#!/usr/bin/env bash
# Issue 39's measurements on one GPU (H100/H200; torch 2.11 + CUDA 13, transformers 5.17, no pydantic, no
# internet), in one call of at most BUDGET_S seconds, from the repository root or a `git archive` copy of it:
#
#   OUT=/results bash benchmarks/gpu/run_all.sh                    # the device machine
#   SMALL=1 OUT=/tmp/out bash benchmarks/gpu/run_all.sh            # CPU rehearsal: tiny shapes, few iterations
#
# Wheels: `bash benchmarks/gpu/fetch_wheels.sh` here downloads them into .gpu/whl (git-ignored); on the device
# they are read from AF_GPU_WHL (default ../whl) and .gpu/whl, unpacked into a site folder first on
# PYTHONPATH (benchmarks/gpu/unpack_wheels.py). Demo assets: built (install.sh's step), else copied from
# AF_GPU_DEMO (default ../demo_assets).
# Parts, each under its own timeout (a part that fails or runs out of time is recorded; the others go on):
#   background, CPU cores of their own (the README's quickstarts ask for `accelerator: cpu`):
#     quickstart     `ascendfactory-cli train cfgs/quickstart.yaml`, unchanged
#     grpo_warmup    `ascendfactory-cli train cfgs/quickstart_grpo_sft.yaml`, unchanged
#     grpo_cpu       `ascendfactory-cli train cfgs/quickstart_grpo.yaml`, unchanged
#   foreground, the GPU (benchmarks/bench_gpu.py, one part per call):
#     env, checks    device, versions, a bf16 matmul; varlen flash attention / chunked CE / fused RMSNorm
#     train          ours vs transformers.Trainer, bf16, seq 2048, MBS 8, Qwen2-0.5B and Qwen2.5-1.5B shapes
#     rollout        the GRPO sampler vs transformers' generate (0.5B shape, the demo shape)
#     memory         the CLI's estimate vs torch.cuda.max_memory_allocated, 0.5B shape, bf16, seq 2048, MBS 8
#     grpo_gpu       step 2 of the GRPO quickstart on the GPU (--accelerator=auto --env.NPUS_PER_NODE=1),
#                    once the warm-up is done and if time is left
# In OUT: summary.json (every part's figures, rc and wall time), run_all.log, bench.log, quickstart.log,
# grpo.log, runs.tar.gz (the runs' logs and the parts' JSON).
# Env: OUT (required), SMALL (0), BUDGET_S (360; SMALL: 1500), PY (python3), AF_GPU_WHL, AF_GPU_DEMO,
# VARIANTS (fused-rmsnorm: our extra train runs, comma-separated, `compile` adds --af-torch-compile).
set -u
T0=$(date +%s)
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$REPO" || exit 2
OUT="${OUT:?set OUT to the results folder}"
SMALL="${SMALL:-0}"
PY="${PY:-python3}"
if [ "$SMALL" = 1 ]; then BUDGET_S="${BUDGET_S:-1500}"; SCALE=4; SMALL_FLAG=--small; else BUDGET_S="${BUDGET_S:-360}"; SCALE=1; SMALL_FLAG=; fi
DEADLINE=$((T0 + BUDGET_S))
VARIANTS="${VARIANTS:-fused-rmsnorm}"
WORK="$(mktemp -d /tmp/af_run_all.XXXXXX)"
RES="$WORK/res"
mkdir -p "$OUT" "$RES" "$WORK/bin"
exec > >(tee -a "$OUT/run_all.log") 2>&1

log() { printf '[run_all %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
# limit CAP RESERVE: seconds a part may take (its cap x SCALE, and what the budget leaves after RESERVE)
limit() {
    local t=$(($(left) - $2)) cap=$(($1 * SCALE))
    [ "$t" -gt "$cap" ] && t=$cap
    echo "$t"
}
record() { # NAME RC WALL_S [EXTRA_JSON]
    printf '{"rc": %s, "wall_s": %s%s}\n' "$2" "$3" "${4:+, $4}" >"$RES/$1.json"
}

# ---- setup: wheels, the CLI, demo assets ------------------------------------------------------------------
SITE="$WORK/site"
"$PY" benchmarks/gpu/unpack_wheels.py "$SITE" "${AF_GPU_WHL:-$REPO/../whl}" "$REPO/.gpu/whl" >"$WORK/wheels.txt" 2>&1 ||
    log "no carried wheels unpacked (see runs.tar.gz wheels.txt)"
export PYTHONPATH="$SITE:$REPO${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MPLBACKEND=Agg
PY_ABS="$("$PY" -c 'import sys; print(sys.executable)')"
printf '#!/bin/sh\nexec "%s" -m ascendfactory.cli.app "$@"\n' "$PY_ABS" >"$WORK/bin/ascendfactory-cli"
chmod +x "$WORK/bin/ascendfactory-cli"
export PATH="$WORK/bin:$(dirname "$PY_ABS"):$PATH"
"$PY" -c 'import pydantic, typer, rich, ascendfactory.cli.app; print("imports ok: pydantic", pydantic.VERSION, "typer", typer.__version__)' ||
    log "the CLI's imports fail: the CLI parts will fail"
if [ ! -f demo_assets/tiny-qwen2/config.json ]; then
    timeout 120 "$PY" -m ascendfactory.engine.demo demo_assets/tiny-qwen2 || {
        log "building the demo model failed: copying ${AF_GPU_DEMO:-../demo_assets}/tiny-qwen2"
        mkdir -p demo_assets && cp -a "${AF_GPU_DEMO:-$REPO/../demo_assets}/tiny-qwen2" demo_assets/
    }
fi
log "setup done: $(tail -1 "$WORK/wheels.txt" 2>/dev/null)"

# CPU cores: the first half for the GPU parts' host side, a quarter each for the two CPU chains
N=$(nproc)
pin() { # CPUS CMD...: taskset when the machine has cores to spare
    local cpus=$1
    shift
    if [ "$N" -ge 8 ] && command -v taskset >/dev/null; then taskset -c "$cpus" "$@"; else "$@"; fi
}
GPU_CPUS="0-$((N / 2 - 1))"
A_CPUS="$((N / 2))-$((3 * N / 4 - 1))"
B_CPUS="$((3 * N / 4))-$((N - 1))"

# SMALL: the quickstarts with few iterations (same files, same commands, overrides appended)
QS_SMALL=() WARM_SMALL=() GRPO_SMALL=()
if [ "$SMALL" = 1 ]; then
    TR=--backend_config.training.
    QS_SMALL=("${TR}train-iters=4" "${TR}save-interval=2" "${TR}eval-interval=2" "${TR}eval-iters=1" "${TR}log-interval=1")
    WARM_SMALL=("${TR}train-iters=4" "${TR}save-interval=2" "${TR}log-interval=1")
    GRPO_SMALL=(--backend_config.megatron_training.train_iters=2 --backend_config.megatron_training.save_interval=1)
fi

# cli NAME LOGFILE CPUS CAP ARGS...: one CLI command under min(CAP, time left - 15 s)
cli() {
    local name=$1 logf=$2 cpus=$3 cap=$4 t rc t1
    shift 4
    t=$(limit "$cap" 15)
    if [ "$t" -lt 20 ]; then
        log "skip $name (${t}s left)"
        record "$name" null 0 '"skipped": "no time left"'
        return 1
    fi
    log "$name: ascendfactory-cli $* (timeout ${t}s)"
    echo "==== $name: ascendfactory-cli $*" >>"$OUT/$logf"
    t1=$(date +%s)
    pin "$cpus" timeout -k 15 "$t" ascendfactory-cli "$@" >>"$OUT/$logf" 2>&1
    rc=$?
    record "$name" "$rc" "$(($(date +%s) - t1))" "\"timeout_s\": $t, \"argv\": \"$*\""
    log "$name rc=$rc in $(($(date +%s) - t1))s"
    return $rc
}

(cli quickstart quickstart.log "$A_CPUS" 330 train cfgs/quickstart.yaml "${QS_SMALL[@]}") &
CHAIN_A=$!
(
    cli grpo_warmup grpo.log "$B_CPUS" 200 train cfgs/quickstart_grpo_sft.yaml "${WARM_SMALL[@]}" &&
        touch "$WORK/warmup.done" &&
        cli grpo_cpu grpo.log "$B_CPUS" 300 train cfgs/quickstart_grpo.yaml "${GRPO_SMALL[@]}"
) &
CHAIN_B=$!

# ---- GPU parts ---------------------------------------------------------------------------------------------
# bench PART CAP RESERVE [ARGS...]: benchmarks/bench_gpu.py's part under min(CAP, time left - RESERVE)
bench() {
    local parts=$1 cap=$2 reserve=$3 name=${1//,/_} t rc t1
    shift 3
    t=$(limit "$cap" "$reserve")
    if [ "$t" -lt 20 ]; then
        log "skip $name (${t}s left)"
        record "$name" null 0 '"skipped": "no time left"'
        return
    fi
    log "$name (timeout ${t}s)"
    t1=$(date +%s)
    pin "$GPU_CPUS" timeout -k 10 "$t" "$PY" benchmarks/bench_gpu.py run --out "$RES" --json "bench_$name.json" \
        --budget $((t - 10)) --parts "$parts" $SMALL_FLAG "$@" >>"$OUT/bench.log" 2>&1
    rc=$?
    record "$name" "$rc" "$(($(date +%s) - t1))"
    log "$name rc=$rc in $(($(date +%s) - t1))s"
}

bench env,checks 45 300
bench train 200 150 --variants "$VARIANTS"
bench rollout 60 90
bench memory 75 30
if [ -f "$WORK/warmup.done" ] || { log "waiting for the GRPO warm-up"; timeout $(($(left) > 60 ? $(left) - 60 : 1)) bash -c "until [ -f '$WORK/warmup.done' ]; do sleep 2; done"; }; then
    if [ "$SMALL" = 1 ]; then ACC=(--accelerator=cpu); else ACC=(--accelerator=auto); fi
    cli grpo_gpu grpo.log "$GPU_CPUS" 200 train cfgs/quickstart_grpo.yaml "${ACC[@]}" --env.NPUS_PER_NODE=1 \
        --env.MASTER_PORT=29529 --af_output_dir=./outputs/tiny-demo-quickstart-grpo-gpu "${GRPO_SMALL[@]}"
else
    record grpo_gpu null 0 '"skipped": "the warm-up did not finish in time"'
fi

# ---- the CPU chains, then the summary ----------------------------------------------------------------------
while kill -0 "$CHAIN_A" 2>/dev/null || kill -0 "$CHAIN_B" 2>/dev/null; do
    [ "$(left)" -lt 8 ] && { log "stopping the CPU chains (budget spent)"; kill "$CHAIN_A" "$CHAIN_B" 2>/dev/null; break; }
    sleep 2
done
log "summary"
"$PY" benchmarks/gpu/summarize.py "$RES" "$OUT/summary.json" "$REPO/outputs" || log "summary failed"
cp "$WORK/wheels.txt" "$RES/" 2>/dev/null
tar -czf "$OUT/runs.tar.gz" -C / "${RES#/}" $(ls -d "$REPO"/outputs/*/logs "$REPO"/outputs/*/exp-config.yaml 2>/dev/null | sed 's|^/||') 2>/dev/null
log "done in $(($(date +%s) - T0))s; in OUT: $(ls "$OUT" | tr '\n' ' ')"
sleep 1 # tee's last lines
