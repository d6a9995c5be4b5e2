"""The analysis of a cluster map (npmpi map), its own: the rows' analysis does not read a map. Its
registration is `cli.KIND` (npmpi_analysis/numbers/kinds.py): `cli.py` the command's path for maps,
`load.py` and `rows.py` reading a map file, `analyse.py` each pair's figures and power, `outliers.py`
and `confirmed.py` the slow links and nodes and their second measurement, `conditions.py`, `model.py`
and `plan.py` what the map adds beside them, `report.py`, `csv_rows.py` and `figures.py` its outputs,
`synthetic.py` maps made for tests and benchmarks."""
