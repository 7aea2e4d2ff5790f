"""``python -m deathtensors``: the ``deathtensors`` command line (same code
as the Rust binary)."""

import sys

from ._legacy import main

if __name__ == "__main__":
    sys.exit(main())
