"""`python -m npmpi`: run the benchmark (see `python -m npmpi --help`)."""

import sys

from npmpi.cli import main

if __name__ == "__main__":
    sys.exit(main())
