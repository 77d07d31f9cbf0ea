"""From a plan to a PyTorch program: the launcher bundle and the runtime it imports.

- :mod:`launcher.structure` the graph's structure digest and the plan's ops expanded to FX node names;
- :mod:`launcher.placement` rank <-> device: hosts, local indices and one torchrun command per node;
- :mod:`launcher.bundle` the bundle (``launch.py``, ``README.md``, ``plan.json``, ``graph.json``,
  ``manifest.json``) as files or as a zip in memory;
- :mod:`launcher.check` ``placer launcher check``: a plan proved to launch on the meta device (needs torch);
- :mod:`launcher.verify` ``placer launcher verify``: one step under torchrun beside the single-process model;
- :mod:`launcher.runtime` what ``launch.py`` runs under torchrun (needs torch).

This package imports ``solvers`` and, in the runtime, ``extract``; never the service.
Importing it does not import torch.
"""

from __future__ import annotations

from launcher.bundle import Bundle, build_bundle, bundle_zip, write_bundle

__all__ = ["Bundle", "build_bundle", "bundle_zip", "write_bundle"]
