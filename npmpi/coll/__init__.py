"""`python -m npmpi coll --op OP`: MPI collectives over every measuring rank, with energy per operation.

ops.py holds the op table (buffer sizes per rank, bandwidth factors, the expected result), step.py
each member's timed loop in either kernel, kind.py the benchmark kind (docs/collectives.md).
"""
