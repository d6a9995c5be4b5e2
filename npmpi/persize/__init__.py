"""The sweep: rank 0's transmitter, the reflector, one side's message loop, the kernels' timed loops
and their clock; `benchmark.sweep` runs it on any communicator."""
