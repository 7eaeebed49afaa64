"""``python -m kit``: the kit's command line; everything it does is ``kit.cli`` (``kit.cli.main``)."""

import sys

from kit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
