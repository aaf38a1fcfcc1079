"""``python -m transformer.cli`` runs the command line, as ``typed-transformer`` and ``python -m transformer`` do."""

import sys

from . import main

if __name__ == "__main__":  # importing this module (pkgutil walks, docs tools) must not run the CLI
    sys.exit(main())
