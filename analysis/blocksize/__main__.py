"""``python -m analysis.blocksize --out DIR [--quick] [--no-weights]``: the block-size study's run record."""

import sys

from analysis.blocksize.study import main

sys.exit(main())
