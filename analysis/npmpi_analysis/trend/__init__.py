"""`npmpi-analyze --trend`: one system's runs in time order (numbers.py the series, its spread and
its changes; figures.py its figure; cli.py the command's path: table, CSV, JSON, figure, HTML).
Built on the public API (npmpi_analysis.api.open_run); reached through numbers/kinds.COMMANDS."""
