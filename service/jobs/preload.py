"""What the forkserver imports once at its start, so that each job's process (a fork of it)
starts warm: the simulator, the registry's table (entry points scanned once) and every solver
class that loads; and it makes the forkserver exit with the server (:mod:`service.jobs.procs`).
Only the forkserver imports this module (see ``service.jobs.runner``); its
import does the work on purpose.
"""

from __future__ import annotations

import service.jobs.child
import service.jobs.procs
import solvers.simulator  # the subpackage (the attribute solvers.simulate is the exported function)
import solvers.solving
from solvers import registry
from solvers.model.errors import PlacerError


def preload() -> None:
    """Load every solver class that loads here; one that does not is reported when a job asks for it."""
    assert service.jobs.child and solvers.solving
    for name in registry.names():
        try:
            registry.get_solver_class(name)
        except PlacerError:
            continue


service.jobs.child.skip_main_reimport()
service.jobs.procs.forkserver_follows_server()
preload()
