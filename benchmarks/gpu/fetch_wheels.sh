#!/usr/bin/env bash
# Download (here, where PyPI is reachable) the wheels the GPU machine's Python lacks for ascendfactory-cli:
# pydantic (absent there), typer 0.29 (pyproject pins >=0.29,<0.30) and its small companions, and rich >= 13.8
# (typer 0.29 needs it) with its pure-Python dependencies. Binary wheels only, for the Python the device runs.
#
#   bash benchmarks/gpu/fetch_wheels.sh [DEST] [PYTHON_VERSION...]     # default: .gpu/whl (git-ignored), 3.12
#
# `run_all.sh` unpacks the ones that fit its interpreter (AF_GPU_WHL, default ../whl then .gpu/whl).
set -eu
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
DEST="${1:-$REPO/.gpu/whl}"
shift || true
VERSIONS=("$@")
[ ${#VERSIONS[@]} -eq 0 ] && VERSIONS=(3.12)
mkdir -p "$DEST"
PKGS=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0 typer==0.29.2 shellingham==1.5.4 annotated-doc==0.0.7
    rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0
)
for v in "${VERSIONS[@]}"; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$v" \
        --platform manylinux2014_x86_64 --implementation cp -d "$DEST" "${PKGS[@]}"
done
ls "$DEST"
