"""spotjobs trainer kit: resume from the newest complete checkpoint, commit on SIGTERM, and
report the run in lines Cloud Logging ingests. Standard library only (Python 3.9+).

    from spotjobs_kit import Run

    run = Run.start()
    ...
    with run.checkpoint(step) as folder:
        save(folder)
"""

from spotjobs_kit.experiment import ExperimentRun, experiment_run
from spotjobs_kit.layout import DEFAULT_COMMIT_MARKERS, Checkpoint
from spotjobs_kit.lines import KitRecord, parse_kit_line
from spotjobs_kit.run import SIGTERM_EXIT_STATUS, Run, checkpoint_name
from spotjobs_kit.storage import KitError

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_COMMIT_MARKERS",
    "SIGTERM_EXIT_STATUS",
    "Checkpoint",
    "ExperimentRun",
    "KitError",
    "KitRecord",
    "Run",
    "checkpoint_name",
    "experiment_run",
    "parse_kit_line",
]
