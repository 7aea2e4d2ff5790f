"""``python -m deathtensors``: the ``deathtensors`` command line (same code
as the Rust binary)."""

import sys

from ._native import cli_main


def main() -> None:
    sys.stdout.flush()
    sys.exit(cli_main(["deathtensors", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
