"""What every command shares: the command line's parser, the sequence of an MPI command, what every
rank agrees on, the thread level, the console, the end of a recording; and `npmpi meters`. Each kind
of benchmark has its own folder (npmpi/run/, npmpi/map/, npmpi/calibrate/); the registry of kinds is
npmpi/kinds/, the entry point npmpi/cli.py."""
