"""What the corpus builders and the training data loader (``train.data``) agree on: where corpora
live and how documents are joined. Dependency-free, so ``train.data`` reads prepared corpora through
this module and ``corpora`` never imports the training code (one direction: train → corpora)."""

from __future__ import annotations

import os
from pathlib import Path

DOC_SEP = b"\n\n"
"""Bytes placed between documents when they are concatenated into one token stream."""


def default_data_dir() -> Path:
    """``$MXSWEEP_DATA_DIR`` if set, else ``<repo>/data``."""
    env = os.environ.get("MXSWEEP_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "data"
