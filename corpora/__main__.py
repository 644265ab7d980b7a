"""``python -m corpora prepare [--data-dir DIR]``: prepare litmix (``corpora.litmix``)."""

import sys

from corpora.litmix import main

sys.exit(main())
