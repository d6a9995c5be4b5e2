"""Power: the power ranks and their samplers, clock offsets, idle baselines, fabric meters, roles
of the ranks, meter delays (calibration). The meters themselves are in npmpi/meters/."""
