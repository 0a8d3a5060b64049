"""The agent SDK: ``from supervisor import Run``.

A run's parts, each in its module: :mod:`.run` (the :class:`Run` facade), :mod:`.options` (call options, the
retry policy, calling a step function), :mod:`.steps` (the one path of a step call, sync and async),
:mod:`.serve` (serving recorded steps, with its explicit phase), :mod:`.recorder` (the records a live step
writes), :mod:`.shadow` (the state as the journal records it), :mod:`.names` and :mod:`.exits`.
"""

from __future__ import annotations

from .exits import EXIT_ERROR, default_run_dir
from .names import StepNames
from .options import StepOptions
from .run import Run
from .serve import Phase

__all__ = ["EXIT_ERROR", "Phase", "Run", "StepNames", "StepOptions", "default_run_dir"]
