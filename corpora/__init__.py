"""Corpus preparation, out of the training core: turning pinned registry packages into the token files
``train.data`` reads. ``litmix`` (the default corpus) is the one builder today; ``common`` holds what
builders and the loader share (the data directory, the document separator).

    python -m corpora prepare [--data-dir DIR]     # litmix into DIR/litmix (also done on first use)
"""

from corpora.common import DOC_SEP, default_data_dir
from corpora.litmix import CorpusError, ensure_litmix, is_prepared

__all__ = ["DOC_SEP", "CorpusError", "default_data_dir", "ensure_litmix", "is_prepared"]
