"""Run this plan: the one entry point that torchrun starts on every node (see README.md).

Every process reads plan.json, graph.json and manifest.json beside this file, rebuilds the
model, checks it against the manifest, runs its share of the plan and writes metrics.json and
run.json (placer.run/v1; --run-record PATH, --profile-steps N).
Placer must be installed on every node (pip install 'placer[torch]').
"""

import sys
from pathlib import Path

from launcher.preflight import refused_early

if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    refusal = refused_early(here, sys.argv[1:])  # before torch is imported: a wrong world size is refused at once
    if refusal is not None:
        sys.stderr.write(f"launch.py: refused: {refusal}\n")
        sys.exit(2)
    from launcher.runtime.main import main

    sys.exit(main(here, sys.argv[1:]))
