"""The analysis of a `coll` file (npmpi coll): its rows are a run's, and this package adds what a
collective is measured by (docs/collectives.md) through the one seam of kinds (kind.py, registered in
npmpi_analysis/numbers/kinds.py): the file split into its series (an op at a rank count), every
rank's bits in energy per bit, OSU's latency across ranks, nccl-tests' algbw and busbw, the energy of
one operation (numbers.py), their table (report.py) and figures (figures.py), and the model's growth
with the rank count (scaling.py)."""
