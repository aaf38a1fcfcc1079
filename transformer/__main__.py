"""``python -m transformer`` runs the ``typed-transformer`` console script."""

import sys

from .cli import main

if __name__ == "__main__":  # importing this module (pkgutil walks, docs tools) must not run the CLI
    sys.exit(main())
