"""NetPIPE 3.7's np.out of an analysed run (`npmpi-analyze --np-out`)."""

from __future__ import annotations

import math

from npmpi.core.modes import MODE_TABLE
from npmpi.core.npout import np_out_line


def np_out_bytes(a) -> bytes:
    """NetPIPE 3.7's np.out, `%8d %lf %12.8lf`: bytes, Mbps (2^20 bit/s), seconds per message.

    As NetPIPE writes it: for bidir (NetPIPE -2) the bytes column is twice the message size and
    Mbps counts both directions ("the combined bandwidth"), the seconds one exchange; for several
    pairs Mbps is the aggregate of all pairs (NetPIPE 5's rule; 3.7 measures one pair only) and
    the seconds one pair's (the slowest pair's best trial). Mbps is the CSV's
    bandwidth_peak_bit_s / 2^20 in every mode."""
    mode = MODE_TABLE.get(str(a.attrs.get("mode", "pingpong")))
    doubled = mode.np_out_bytes_factor if mode else 1
    lines = []
    for size, t, bit_s in zip(a.bw.size_bytes, a.bw.one_way_s, a.bw.peak_bit_s, strict=True):
        if math.isfinite(t) and t > 0 and math.isfinite(bit_s):
            lines.append(np_out_line(int(size), float(bit_s), float(t), doubled == 2))
    return "".join(lines).encode()
