"""`python -m npmpi` and the `npmpi` command: run the benchmark (see `python -m npmpi --help`)."""

import sys


def main() -> int:
    """npmpi.cli.main, with a standard output that cannot be written reported in one line."""
    from npmpi.cli import main as cli_main
    from npmpi.core.stdio import run_guarded

    return run_guarded(cli_main, "npmpi")


if __name__ == "__main__":
    sys.exit(main())
