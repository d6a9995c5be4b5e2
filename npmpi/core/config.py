"""What a run needs to know from its command line: `Options` and its defaults, with no argparse.

The measuring modules (npmpi/persize/transmitter.py, npmpi/commands/threadlevel.py,
npmpi/run/recording.py) import these; npmpi/run/options.py parses the command line into them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from npmpi.core.buffers import ARRANGEMENT_NETPIPE, ARRANGEMENT_OSU, HUGE_PAGES_SYSTEM
from npmpi.core.modes import DEFAULT_CACHE_POOL_BYTES, MODE_PINGPONG, Mode, mode_named

DEFAULT_PROTOCOL = "mpi"  # --protocol's default: MPI two-sided (npmpi/protocols/mpi/__init__.py)
DEFAULT_LOWER_BYTES = 1
DEFAULT_UPPER_BYTES = 8 << 20
DEFAULT_PERTURBATION = 3
DEFAULT_TRIALS = 7  # NetPIPE 3.7's TRIALS (its release build); also the floor of iterations
DEFAULT_TARGET_TIME_S = 0.05  # NetPIPE's RUNTM; why 7 trials at 0.05 s: docs/netpipe-comparison.md
QUICK_TRIALS = 3
QUICK_TARGET_TIME_S = 0.004
DEFAULT_MAX_ONE_WAY_S = 1.0  # NetPIPE 3.7's STOPTM
MAX_TARGET_TIME_S = 3600.0
MAX_REPEATS = 1_000_000_000
DEFAULT_BASELINE_S = 3.0
THREAD_LEVEL_AUTO = "auto"
THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")
MAX_BASELINE_S = 3600.0
DEFAULT_STALL_TIMEOUT_S = 60.0  # --stall-timeout: the floor of the stall bound (npmpi/persize/watchdog.py)
MAX_STALL_TIMEOUT_S = 7 * 24 * 3600.0


@dataclass(frozen=True)
class Options:
    """Everything a run needs to know from its command line, with units in the names."""

    lower_bytes: int
    upper_bytes: int
    trials: int
    target_time_s: float
    kernel: str
    # the sweep's own rules (a map measures its sizes without them: these defaults)
    perturbation_bytes: int = 0
    repeats: int | None = None
    max_one_way_s: float = float("inf")
    integrity: bool = False
    quick: bool = False
    output: str | None = None
    force: bool = False
    quiet: bool = False
    meters: tuple = ()  # --meter's spec values (npmpi.meters.MeterSpec), checked by the command line
    sample_interval_s: float | None = None
    baseline_s: float | None = None
    meter_optional: bool = False
    calibration: str | None = None
    mode: str = MODE_PINGPONG
    window: int = 1  # messages per iteration and direction: --window in stream/bidir mode, else 1
    pairs: int | str = 1  # a number of pairs, or "all"
    async_: bool = False
    cache_cold: bool = False
    cache_pool_bytes: int = DEFAULT_CACHE_POOL_BYTES
    buffers: str = ARRANGEMENT_NETPIPE
    huge_pages: str = HUGE_PAGES_SYSTEM
    thread_level: str = THREAD_LEVEL_AUTO
    fabric_meters: tuple = ()  # --fabric-meter's spec values: devices of no node (switches, a shared PDU)
    fabric_rank: int | None = None  # --fabric-rank: the power rank sampling them (None: node 0's)
    np_out: str | None = None  # --np-out: NetPIPE's np.out written as the run goes
    protocol: str = DEFAULT_PROTOCOL  # --protocol: the layer the timed loop goes through
    # --protocol tcp (npmpi/protocols/tcp/link.py): where to listen, the socket buffers, a fresh
    # connection per trial, how long a pair waits for its connection
    tcp_address: str | None = None
    tcp_port: int = 0
    socket_buffer_bytes: int | None = None
    tcp_reconnect: bool = False
    tcp_connect_timeout_s: float = 10.0
    # --protocol rma (npmpi/protocols/rma/link.py): MPI_Put or MPI_Get, fences or passive-target locks
    rma_op: str = "put"
    rma_sync: str = "fence"
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S  # --stall-timeout (0: no stall watchdog)
    # how the sizes are sampled (npmpi/core/sampling.py): --order and its seed (drawn when not given),
    # --precision (a fraction; None: --trials trials per size), --precision-cap, --max-trials
    size_order: str = "ascending"
    order_seed: int | None = None
    precision: float | None = None
    precision_cap_s: float | None = None
    max_trials: int = 100

    def to_dict(self) -> dict:
        """The options as the run file stores them (options_json): a spec as it was given."""
        out = asdict(self)
        out["meters"] = [spec.text for spec in self.meters]
        out["fabric_meters"] = [spec.text for spec in self.fabric_meters]
        return out

    @property
    def mode_value(self) -> Mode:
        """--mode as its Mode value."""
        return mode_named(self.mode)

    @property
    def messages_per_iteration(self) -> int:
        """Messages one way per iteration of the timed loop (a stream's or bidir's window, else 1)."""
        return self.mode_value.messages_per_iteration(self.window)

    @property
    def largest_message_bytes(self) -> int:
        return self.upper_bytes + self.perturbation_bytes

    @property
    def pool_bytes(self) -> int:
        """Bytes of each of a measuring rank's send and receive buffers (pools)."""
        return self.mode_value.pool_bytes(
            self.window, self.cache_cold, self.cache_pool_bytes, self.largest_message_bytes, self.one_region
        )

    @property
    def one_region(self) -> bool:
        """Every message of a window from one send buffer and into one receive buffer (--buffers osu)."""
        return self.buffers == ARRANGEMENT_OSU
