"""What the tests share and that is no test: launching mpirun jobs, Slurm and network-namespace hosts,
reliability helpers, a kind written outside npmpi (tests/README.md lists them)."""
