"""Faithful fakes of the interfaces power meters read: a Watts Up? on a pty, sysfs trees, pynvml, ipmitool."""

from pathlib import Path

BIN = Path(__file__).resolve().parent / "bin"  # holds the fake `ipmitool` executable
