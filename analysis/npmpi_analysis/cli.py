"""`npmpi-analyze`: placeholder entry point, replaced by the analysis implementation."""

import sys


def main(argv=None) -> int:
    print("npmpi-analyze: not implemented yet", file=sys.stderr)
    return 1
