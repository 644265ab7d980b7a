"""Training callbacks shared by the tests that drive ``train.loop.train`` in-process."""

from __future__ import annotations

import os
import signal

from train.callbacks import Callback


class StopAt(Callback):
    """Simulates a preemption: sends SIGUSR1 to this process after ``step`` (the checkpointer
    catches it, saves and stops the run as ``interrupted``)."""

    def __init__(self, step: int):
        self.at = step

    def on_step_end(self, state, metrics):
        if state.step == self.at:
            os.kill(os.getpid(), signal.SIGUSR1)
