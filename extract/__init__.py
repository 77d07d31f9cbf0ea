"""From a PyTorch model to Placer's inputs: extraction, profiling and topology measurement.

Steps, one module each:

- :mod:`extract.examples` built-in transformers models (random weights, no download);
- :mod:`extract.spec` a user's ``package.module:callable`` and ``--input`` shapes;
- :mod:`extract.build` one record (``attrs["source"]``) -> the same model and inputs again;
- :mod:`extract.export` ``torch.export`` (non-strict) -> ``placer.opgraph/v1`` nodes and edges;
- :mod:`extract.estimate` FLOPs, bytes moved and saved tensors per op, roofline times;
- :mod:`extract.granularity` ops merged into modules of a given depth;
- :mod:`extract.profile` measured per-op times with PyTorch's profiler;
- :mod:`extract.measure` the ``torchrun`` program behind ``placer topology measure``.

``build``, ``examples``, ``spec`` and ``export`` depend only on torch, transformers and
``solvers``, so that a launcher can rebuild and re-export the model and find each op id again.
Importing this package does not import torch: :func:`require_torch` does, with a message that
names the ``torch`` extra when it is missing.
"""

from __future__ import annotations

from extract.deps import require_torch, versions

__all__ = ["require_torch", "versions"]
