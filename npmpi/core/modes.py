"""Measurement modes and how each one's trial time turns into bandwidth and one-way time.

- pingpong: one message there and back per iteration (NetPIPE's default).
- stream: a window of messages one way per iteration, then a small acknowledgement (NetPIPE -s,
  osu_bw): one-way throughput.
- bidir: both sides send one message to each other at once per iteration (NetPIPE -2); with
  --window N, a window of N messages each way at once per iteration (osu_bibw).

For every mode, `bytes_per_iteration_factor` times the message size is what one iteration moves
(both directions counted; times the number of pairs for the aggregate), and a trial's time divided
by `one_way_divisor` is the time of one message.
"""

from __future__ import annotations

from dataclasses import dataclass

MODE_PINGPONG = "pingpong"
MODE_STREAM = "stream"
MODE_BIDIR = "bidir"

DEFAULT_WINDOW = 64  # osu_bw's window
MAX_WINDOW = 65536

DEFAULT_CACHE_POOL_BYTES = 64 << 20  # per buffer; enlarged to hold at least two of the largest message
MAX_COLD_REGIONS = 8192  # regions a --cache-cold run cycles through, spread over the whole pool
STREAM_POOL_BYTES = 16 << 20  # receive buffer of a stream window (one region per message while it fits)
REGION_ALIGN_BYTES = 64  # a cache line: regions never share one


@dataclass(frozen=True)
class ModeFactors:
    """How to turn one trial's time into bandwidth and one-way time (stored as root attributes)."""

    bytes_per_iteration_factor: int  # bytes moved per iteration / message size (all pairs)
    one_way_factor: int  # one_way_divisor = one_way_factor * iterations

    def one_way_divisor(self, iterations: int) -> int:
        return self.one_way_factor * iterations


@dataclass(frozen=True)
class Mode:
    """One mode as a value: what an iteration moves, how its time is read, what it is called.

    `{window}` in a text is the stream's window. A windowed mode's iteration is `window` messages one
    way; the others' is one message each way (`bytes_factor` and `one_way_factor` per pair)."""

    name: str
    windowed: bool  # an iteration is a window of messages one way, then an acknowledgement
    bytes_factor: int  # bytes moved per iteration, pair and message of the window / message size
    one_way_factor: int  # iteration time / (window x one message's time)
    round_trip: bool  # both directions in every iteration: a slow direction is not told apart
    np_out_bytes_factor: int  # NetPIPE's np.out bytes column / message size (NetPIPE -2 doubles it)
    header: str  # the console's header phrase
    bandwidth_label: str  # the console's bandwidth column
    latency_label: str  # the console's latency column
    analysis_label: str  # what the analysis calls the run's bandwidth
    repeats_unit: str  # what an iteration is called in the console's header
    help_note: str  # what it is, for --mode's help
    # an iteration is the kernels' plain ping-pong (one message there and back): without --async and
    # --cache-cold the message loop runs their ping-pong loop (NetPIPE's) instead of the transfer loop
    plain_kernel: bool = False
    # --window may give it a window of messages each way per iteration (bidir: osu_bibw); its
    # default window is 1 (NetPIPE -2). A windowed mode's default is DEFAULT_WINDOW.
    window_optional: bool = False
    windowed_text: str = ""  # what the header, labels and help add when its window is over 1

    def takes_window(self) -> bool:
        """Whether --window applies to it."""
        return self.windowed or self.window_optional

    def default_window(self) -> int:
        return DEFAULT_WINDOW if self.windowed else 1

    def factors(self, window: int = 1, pairs: int = 1) -> ModeFactors:
        """pingpong: 2 per pair, one way = t / (2 i); stream: window per pair, t / (window i);
        bidir: 2 window per pair (both directions), t / (window i)."""
        window = self.messages_per_iteration(window)
        return ModeFactors(self.bytes_factor * window * pairs, self.one_way_factor * window)

    def messages_per_iteration(self, window: int) -> int:
        """Messages one way per iteration: NetPIPE's repeats are counted in messages."""
        return window if self.takes_window() else 1

    def labelled(self, text: str, window: int | str) -> str:
        """A header or label of this mode, with the window's words when it has one over 1."""
        text = text.format(window=window)
        if self.window_optional and isinstance(window, int) and window > 1:
            text += self.windowed_text.format(window=window)
        return text

    def describe(self, window: int, pairs: int, async_: bool, cache_cold: bool) -> str:
        """One phrase for the console header."""
        text = self.labelled(self.header, window)
        if pairs > 1:
            text += f", {pairs} pairs at once (aggregate = slowest pair's time)"
        if async_:
            text += ", receives pre-posted (--async)"
        if cache_cold:
            text += ", cache-cold buffers"
        return text

    def pool_bytes(
        self, window: int, cache_cold: bool, cache_pool: int, largest: int, one_region: bool = False
    ) -> int:
        """Bytes of each of a rank's send and receive pools (`one_region`: --buffers osu, every
        message of a window in one buffer)."""
        if cache_cold:
            return max(cache_pool, 2 * _align(largest))
        if self.messages_per_iteration(window) > 1 and not one_region:
            return max(largest, 1, min(window * _align(largest), STREAM_POOL_BYTES))
        return max(largest, 1)

    def regions(
        self, window: int, cache_cold: bool, pool: int, size: int, one_region: bool = False
    ) -> tuple[int, int]:
        """(regions, stride in bytes) of the pools a size's messages cycle through.

        Message m of a trial (m counts every message of the trial in order) uses region m % regions
        on both sides. Without --cache-cold, pingpong and bidir use one region; a window (stream,
        windowed bidir) one per message of the window while they fit in the pool, unless
        `one_region` (--buffers osu: every message of a window from one buffer and into one, as
        osu_bw). With --cache-cold, up to MAX_COLD_REGIONS regions spread over the whole pool, so
        consecutive messages never touch the same cache lines.
        """
        if cache_cold:
            stride = max(_align(size), (pool // MAX_COLD_REGIONS) // REGION_ALIGN_BYTES * REGION_ALIGN_BYTES)
            return max(1, min(MAX_COLD_REGIONS, pool // stride)), stride
        if self.messages_per_iteration(window) > 1 and size > 0 and not one_region:
            stride = _align(size)
            regions = max(1, min(window, pool // stride))
            if regions > 1:
                return regions, stride
        return 1, 0


_PINGPONG = Mode(
    name=MODE_PINGPONG,
    windowed=False,
    bytes_factor=2,
    one_way_factor=2,
    round_trip=True,
    np_out_bytes_factor=1,
    header="ping-pong",
    bandwidth_label="bandwidth",
    latency_label="latency (one-way)",
    analysis_label="ping-pong",
    repeats_unit="round trips",
    help_note="a message there and back, NetPIPE's default",
    plain_kernel=True,
)
_STREAM = Mode(
    name=MODE_STREAM,
    windowed=True,
    bytes_factor=1,
    one_way_factor=1,
    round_trip=False,
    np_out_bytes_factor=1,
    header="stream (one way, window {window}, acknowledged)",
    bandwidth_label="one-way stream bandwidth",
    latency_label="time per streamed message",
    analysis_label="one-way stream (window {window})",
    repeats_unit="iterations",
    help_note="a window of messages one way, then an acknowledgement: one-way throughput, NetPIPE -s, osu_bw",
)
_BIDIR = Mode(
    name=MODE_BIDIR,
    windowed=False,
    bytes_factor=2,
    one_way_factor=1,
    round_trip=True,
    np_out_bytes_factor=2,
    header="bidirectional (both directions counted)",
    bandwidth_label="bidirectional bandwidth (both directions)",
    latency_label="latency (one exchange, both ways at once)",
    analysis_label="bidirectional (both directions)",
    repeats_unit="iterations",
    help_note="both sides send at once, both directions counted: NetPIPE -2; with --window N, N "
    "messages each way per iteration as osu_bibw",
    window_optional=True,
    windowed_text=", window {window} each way",
)
MODE_TABLE = {m.name: m for m in (_PINGPONG, _STREAM, _BIDIR)}
MODES = tuple(MODE_TABLE)


def mode_named(name: str) -> Mode:
    """The mode of a name; ValueError for an unknown one."""
    try:
        return MODE_TABLE[name]
    except KeyError:
        raise ValueError(f"unknown mode {name!r}") from None


def mode_factors(mode: str, window: int = 1, pairs: int = 1) -> ModeFactors:
    """The factors of a mode given by name (see Mode.factors)."""
    return mode_named(mode).factors(window, pairs)


def _align(n: int) -> int:
    return max(REGION_ALIGN_BYTES, -(-n // REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES)


def pool_bytes(
    mode: str, window: int, cache_cold: bool, cache_pool: int, largest: int, one_region: bool = False
) -> int:
    """Bytes of each of a rank's send and receive pools, for a mode given by name (Mode.pool_bytes)."""
    return mode_named(mode).pool_bytes(window, cache_cold, cache_pool, largest, one_region)


def regions_for(
    mode: str, window: int, cache_cold: bool, pool: int, size: int, one_region: bool = False
) -> tuple[int, int]:
    """(regions, stride) of the pools for a mode given by name (Mode.regions)."""
    return mode_named(mode).regions(window, cache_cold, pool, size, one_region)


def shared_from_bytes(mode: str, window: int, cache_cold: bool, pool: int, largest: int) -> int:
    """The least message size (up to `largest`) whose window of messages in flight has fewer regions
    than messages, so that two pending receives share one (the pool's cap, STREAM_POOL_BYTES, or
    --cache-cold's spread); 0 when every size has a region per message. Not for --buffers osu, which
    shares one region on purpose and says so."""
    m = mode_named(mode)
    flight = m.messages_per_iteration(window)
    if flight <= 1 or largest < 1:
        return 0

    def shared(size: int) -> bool:
        return m.regions(window, cache_cold, pool, size)[0] < flight

    if not shared(largest):
        return 0
    low, high = 1, largest  # regions never grow with the size: the first shared size by bisection
    while low < high:
        mid = (low + high) // 2
        if shared(mid):
            high = mid
        else:
            low = mid + 1
    return low
