"""``python -m identify ...`` is the same as the ``twinid`` command."""
import sys

from identify.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
