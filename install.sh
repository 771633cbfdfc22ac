#!/bin/sh
# Install ascendfactory-cli into the current Python environment. Safe to run again.
#
#   sh install.sh [BACKEND ...] [--dev]
#
# BACKEND: one or more registered backends (default torch, the embedded PyTorch backend;
#          `ascendfactory-cli experiments` lists them all), or `eval` (the lm-evaluation-harness environment
#          of `ascendfactory-cli eval`), each installed in turn. --dev: also the test and lint tools.
# Environment: PYTHON (default python3), AF_TORCH_SPEC (default torch==2.13.0: the CPU wheel this
# project's machines serve; on a GPU/NPU machine install your own torch first and it is kept),
# AF_TRACKERS (tracker clients for a framework's own environment: mlflow,wandb,swanlab; --dev: mlflow).
set -eu

PYTHON="${PYTHON:-python3}"
AF_TORCH_SPEC="${AF_TORCH_SPEC:-torch==2.13.0}"
BACKENDS=""
DEV=0
for arg in "$@"; do
    case "$arg" in
        --dev) DEV=1 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) echo "install.sh: unknown flag '$arg' (flags: --dev, -h)" >&2; exit 2 ;;
        *) BACKENDS="$BACKENDS $arg" ;;  # checked against the backend registry once the core is installed
    esac
done
HERE="$(cd "$(dirname "$0")" && pwd)"
say() { printf '[install] %s\n' "$*"; }

# torch only when missing: an unpinned torch would pull several GB of CUDA packages.
if "$PYTHON" -c "import torch" >/dev/null 2>&1; then
    say "torch $("$PYTHON" -c 'import torch; print(torch.__version__)') already installed; keeping it"
else
    say "torch missing: installing $AF_TORCH_SPEC"
    "$PYTHON" -m pip install --quiet "$AF_TORCH_SPEC"
fi

EXTRAS="torch"
[ "$DEV" = 1 ] && EXTRAS="torch,dev"

# --dev: a real Slurm for the `submit slurm` tests (Debian's slurmctld, slurmd, slurm-client; the test
# fixture starts a private single-host cluster with auth/none, so munge need not run). Only as root with
# apt-get; elsewhere those tests skip.
if [ "$DEV" = 1 ]; then
    if command -v sbatch >/dev/null 2>&1 && command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1; then
        say "slurm present: $(sbatch --version)"
    elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing slurmctld slurmd slurm-client (apt) for the submit slurm tests"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client >/dev/null \
            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client >/dev/null; }
    else
        say "skipping slurm (needs root and apt-get): the submit slurm tests will skip"
    fi
fi
# Tracker clients for a framework's own environment (`report_to`): only when asked, AF_TRACKERS=mlflow,wandb
# ...; --dev asks for MLflow (the LLaMA-Factory + MLflow integration test needs it there).
if [ "$DEV" = 1 ]; then
    AF_TRACKERS="${AF_TRACKERS:-mlflow}"
    export AF_TRACKERS
fi
say "installing ascendfactory-cli[$EXTRAS] (editable) from $HERE"
# compat mode: a plain .pth path entry instead of an import-hook finder (~20 ms less at every CLI start-up)
"$PYTHON" -m pip install --quiet -e "$HERE[$EXTRAS]" --config-settings editable_mode=compat

# The offline demo model the quickstart trains (a locally trained tokenizer + a tiny Qwen2-style model).
DEMO="$HERE/demo_assets/tiny-qwen2"
if [ -f "$DEMO/config.json" ] && [ -f "$DEMO/model.safetensors" ]; then
    say "demo model present: $DEMO"
else
    say "building the demo model into $DEMO"
    "$PYTHON" -m ascendfactory.engine.demo "$DEMO"
fi
# The mixture-of-experts demos (cfgs/quickstart_qwen3_moe.yaml, cfgs/quickstart_deepseek2_lite.yaml).
for FAMILY in qwen3_moe:tiny-qwen3-moe deepseek_v2_lite:tiny-deepseek-v2-lite; do
    MOE_DEMO="$HERE/demo_assets/${FAMILY#*:}"
    if ! { [ -f "$MOE_DEMO/config.json" ] && [ -f "$MOE_DEMO/model.safetensors" ]; }; then
        say "building the demo model into $MOE_DEMO"
        "$PYTHON" -m ascendfactory.engine.demo "$MOE_DEMO" --family "${FAMILY%%:*}"
    fi
done

# The backend's own installation plan (an unknown name fails here, listing the registered ones): printed,
# then run (each step is skipped or harmless when already done; a backend whose steps this version does
# not run only prints its plan).
for BACKEND in ${BACKENDS:-torch}; do
    "$PYTHON" -m ascendfactory.cli.app doctor --install-plan "$BACKEND"
    "$PYTHON" -m ascendfactory.cli.app doctor --install-plan "$BACKEND" --run
done
say "done: $(command -v ascendfactory-cli || echo "ascendfactory-cli (add $("$PYTHON" -c 'import sysconfig; print(sysconfig.get_path("scripts"))') to PATH)")"
