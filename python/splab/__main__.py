"""`python -m splab ARGS` (and the `splab` script): splab's command line."""

import sys

from . import _splab


def main() -> None:
    sys.exit(_splab.main(["splab", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
