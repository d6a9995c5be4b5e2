"""The run file (and a map's): its format, writing it row by row, reading it back without MPI.

The analysis imports only this package (and the leaves it needs: errors, safetext, units, map/stats).
"""
