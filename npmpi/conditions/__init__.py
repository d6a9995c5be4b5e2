"""The conditions of a measurement: each measuring rank's core frequency, throttling and its node's
NIC bytes over each size's trials, and the node's frequency settings (docs/power.md, "What moves an
energy figure"). Readers only: no MPI; the sweep reads them around the trials (npmpi/persize/)."""
