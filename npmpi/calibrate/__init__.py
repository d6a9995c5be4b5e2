"""`python -m npmpi calibrate`: each meter's delay from load bursts (npmpi/calibrate/command.py)."""
