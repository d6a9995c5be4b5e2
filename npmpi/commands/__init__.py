"""The commands' shared parts and the run, calibrate and meters commands: the command line declared
and checked, what every rank agrees on, the thread level, rank 0's recording and what it prints
(the map's own parts are in npmpi/map/; the entry point is npmpi/cli.py)."""
