"""The numbers of the analysis: reading run and map files, the formulas, power, energy, faults, maps.

The bottom of the analysis: nothing here imports the outputs or the figures above it."""
