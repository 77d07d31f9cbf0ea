#!/usr/bin/env bash
# On a lent GPU machine, from the repository root (its python3 holds PyTorch with CUDA):
#   bash bench/gpu/wheels.sh            # here, once: the wheels that machine lacks, into .whl/
#   device run, carry [".whl"]:  bash bench/gpu/run.sh
# Installs the carried wheels into /tmp/site, then runs bench/gpu/check.py; the log goes to
# $OUT/gpu.log where $OUT is set (the device tool's folder that comes back), else /tmp/placer-gpu.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
dest="${OUT:-/tmp/placer-gpu}"
mkdir -p "$dest"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$dest/gpu.log" || true
status=0
PYTHONUNBUFFERED=1 timeout 480 python3 bench/gpu/check.py --out /tmp/placer-gpu-work --keep "$dest" "$@" 2>&1 \
  | tee -a "$dest/gpu.log" || status=$?
# the device tool brings back a few files only: the kept folders travel as one archive
if compgen -G "$dest/*/" > /dev/null; then
  tar -C "$dest" -czf /tmp/placer-gpu-kept.tar.gz --exclude gpu.log . \
    && find "$dest" -mindepth 1 -maxdepth 1 ! -name gpu.log -exec rm -rf {} + && mv /tmp/placer-gpu-kept.tar.gz "$dest/kept.tar.gz"
fi
exit "$status"
