"""``python -m evokit.cli``."""

import sys

from evokit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
