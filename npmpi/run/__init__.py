"""The run: `python -m npmpi [OPTIONS]`, the ping-pong sweep of one pair or several (npmpi/run/kind.py)."""
