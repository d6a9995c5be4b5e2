"""What every layer shares, with no MPI at import: errors, text and units, the options' values, the
ranks' protocol and layout, the modes, buffers and size schedule, files read and written, the job's
one-line errors and aborts."""
