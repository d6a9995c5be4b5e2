"""Offline analysis of npmpi run files (no MPI needed)."""
