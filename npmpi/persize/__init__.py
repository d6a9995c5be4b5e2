"""The per-size engine every kind shares: one size's sequence between rank 0 and the measuring ranks
(the driver), rank 0's transmitter, the reflector, one side's message loop, the kernels' timed loops
and their clock, the stall watchdog, the CPU and conditions spans, and opening the run's protocol
link; `benchmark.sweep` runs a sweep on any communicator. The protocols' own links and loops are in
their rooms (npmpi/protocols/)."""
