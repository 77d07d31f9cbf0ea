#!/usr/bin/env bash
# CPU runs on a lent many-core machine, from the repository root (bench/gpu/cpu_runs.py):
#   bash bench/gpu/wheels.sh                      # here, once: the wheels that machine lacks, into .whl/
#   device run, carry [".whl"], timeout_s 330:  bash bench/gpu/cpu_runs.sh 290
# The argument is the deadline in seconds (default 290) by which every run has ended; the fit and the
# tables follow within about 25 s, then the archive. Installs the carried wheels into /tmp/site, logs to
# $OUT/cpu_runs.log where $OUT is set (the device tool's folder that comes back), else /tmp/placer-cpu,
# and tars what the driver kept (graphs, plans, run records, calibration) into $OUT/cpu_runs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
deadline_s="${1:-290}"
shift || true
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export CUDA_VISIBLE_DEVICES=  # CPU runs only: the launcher would take the GPU wherever torch sees one
dest="${OUT:-/tmp/placer-cpu}"
mkdir -p "$dest"
kept=/tmp/placer-cpu-kept
rm -rf "$kept"
log="$dest/cpu_runs.log"
{ nproc; uptime; } > "$log" 2>&1
status=0
# the driver stops starting runs in time; the outer limit is only a guard (20 s past the deadline)
PYTHONUNBUFFERED=1 timeout -k 5 "$((deadline_s + 20))" python3 bench/gpu/cpu_runs.py --out /tmp/placer-cpu-work \
  --keep "$kept" --deadline-s "$deadline_s" "$@" 2>&1 | tee -a "$log" || status=$?
uptime >> "$log"
if [ -d "$kept" ]; then
  tar -C "$kept" -czf "$dest/cpu_runs.tar.gz" .
fi
exit "$status"
