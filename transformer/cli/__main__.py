"""``python -m transformer.cli`` runs the ``typed-transformer`` console script (as ``python -m transformer`` does)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
