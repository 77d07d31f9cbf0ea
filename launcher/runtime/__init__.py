"""What ``launch.py`` runs on every node under torchrun (imports torch).

- :mod:`launcher.runtime.model` rebuild the model, re-export it and check it against the graph;
- :mod:`launcher.runtime.partition` the exported graph cut into one FX module per stage;
- :mod:`launcher.runtime.world` the process group, rank <-> device, the refusals;
- :mod:`launcher.runtime.pipeline` throughput plans: ``PipelineStage`` + ``ScheduleGPipe`` / ``Schedule1F1B``;
- :mod:`launcher.runtime.uneven` throughput plans whose stages have different replica counts;
- :mod:`launcher.runtime.dataflow` latency plans: each rank runs its ops in the plan's order;
- :mod:`launcher.runtime.data` batches and loss (synthetic, or the user's ``--data``);
- :mod:`launcher.runtime.loop` the training loop and ``metrics.json``;
- :mod:`launcher.runtime.main` the command line of ``launch.py`` and the checks before any work.
"""
