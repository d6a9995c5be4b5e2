"""`python -m npmpi_analysis`: the same as `npmpi-analyze`."""

import sys

from npmpi_analysis.cli import main

sys.exit(main())
