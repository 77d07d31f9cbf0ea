"""Jobs: submission, the claim/lease/reaper protocol, the solver child process, dispatchers.

``store`` holds every database transition (independent of how ids reach a worker);
``runner`` executes one job id in a child process; ``dispatch`` gets ids to runners.
"""
