"""Run this plan: the one entry point that torchrun starts on every node (see README.md).

Every process reads plan.json, graph.json and manifest.json beside this file, rebuilds the
model, checks it against the manifest, runs its share of the plan and writes metrics.json and
run.json (placer.run/v1; --run-record PATH, --profile-steps N).
Placer must be installed on every node (pip install 'placer[torch]').
"""

import sys
from pathlib import Path

from launcher.runtime.main import main

if __name__ == "__main__":
    sys.exit(main(Path(__file__).resolve().parent, sys.argv[1:]))
