"""The command line of `python -m npmpi` declared for argparse: one function per option group. An
option of a run only is declared here; one that other commands share is added by name with the run's
help text (its flags and type: npmpi/commands/parser.py). npmpi/run/options.py checks what this
parses.
"""

from __future__ import annotations

import argparse

from npmpi.commands.parser import (
    add_option,
    add_options,
    command_name,
    command_parser,
    count_arg,
    one_or_other,
    seconds_arg,
)
from npmpi.core.buffers import HUGE_PAGES_SYSTEM
from npmpi.core.config import (
    DEFAULT_BASELINE_S,
    DEFAULT_LOWER_BYTES,
    DEFAULT_MAX_ONE_WAY_S,
    DEFAULT_PERTURBATION,
    DEFAULT_TARGET_TIME_S,
    DEFAULT_TRIALS,
    DEFAULT_UPPER_BYTES,
    QUICK_TARGET_TIME_S,
    QUICK_TRIALS,
    THREAD_LEVEL_AUTO,
)
from npmpi.core.modes import DEFAULT_WINDOW, MODE_TABLE
from npmpi.core.units import parse_size_bytes, parse_whole
from npmpi.meters.base import kinds_text
from npmpi.persize.kernels import KERNEL_NOTES
from npmpi.persize.watchdog import STALL_FACTOR
from npmpi.run.protocol_options import add_protocol_options

# What `--help` lists after the options: the subcommands, given first on the command line.
SUBCOMMANDS = (
    ("map", "measure every pair of nodes: latency, bandwidth, energy per bit per link"),
    ("coll", "MPI collectives across every rank: latency, algbw/busbw, joules per operation"),
    ("calibrate", "measure each meter's reporting delay, for --calibration"),
    ("meters", "which power meters work on this node and why not (no MPI needed)"),
)


def _size(text: str) -> int:
    try:
        return parse_size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pairs(text: str) -> int | str:
    if text.strip().lower() == "all":
        return "all"
    try:
        return parse_whole(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid pairs {text!r}: expected a whole number or 'all'"
        ) from None


def _add_size_options(p: argparse.ArgumentParser) -> None:
    """Message sizes: --lower, --upper, --perturbation."""
    g = p.add_argument_group("message sizes")
    g.add_argument(
        "-l",
        "--lower",
        type=_size,
        default=DEFAULT_LOWER_BYTES,
        metavar="SIZE",
        help="smallest message size in bytes; 0 measures 0-byte messages first (osu_latency's first row), "
        "then NetPIPE's sizes from 1 B (default: %(default)s B)",
    )
    g.add_argument(
        "-u",
        "--upper",
        type=_size,
        default=DEFAULT_UPPER_BYTES,
        metavar="SIZE",
        help="largest base message size in bytes; perturbed sizes may pass it by up to -p "
        "(default: 8M = 8388608 B)",
    )
    g.add_argument(
        "-p",
        "--perturbation",
        type=count_arg,
        default=DEFAULT_PERTURBATION,
        metavar="BYTES",
        help="also test n-p and n+p around each size n, as NetPIPE does; 0 turns it off "
        "(default: %(default)s B)",
    )


def _add_repetition_options(p: argparse.ArgumentParser) -> None:
    """Repetition: trials, target time or fixed repeats, --quick, the stop limit."""
    g = p.add_argument_group("repetition")
    add_option(
        g,
        "--trials",
        f"trials per size; the best one is NetPIPE's figure, and no trial has fewer repeats "
        "(NetPIPE's TRIALS: round trips, exchanges, or messages of a stream) "
        f"(default: {DEFAULT_TRIALS}, {QUICK_TRIALS} with --quick)",
    )
    add_option(
        g,
        "--target-time",
        "NetPIPE's RUNTM: iterations per trial = max(SECONDS / ((b/(b-inc+1)) x t), trials), with "
        "t the previous size b's best one-way time and inc the schedule's increment, as NetPIPE 3.7 "
        "computes nrepeat; a ping-pong trial then lasts 0.7-2 x SECONDS (NetPIPE's release build: "
        f"0.25 s, Debian's NPopenmpi: 0.1 s with --trials 3) (default: {DEFAULT_TARGET_TIME_S} s, "
        f"{QUICK_TARGET_TIME_S} s with --quick)",
    )
    g.add_argument(
        "--repeats",
        type=count_arg,
        default=None,
        metavar="N",
        help="fixed number of round trips per trial instead of --target-time (default: none, "
        "NetPIPE's rule from --target-time)",
    )
    add_option(
        g,
        "--quick",
        "a run of a few seconds: same sizes, fewer trials, shorter target time",
    )
    add_option(
        g,
        "--order",
        "ascending: each size after the one before (NetPIPE's); random: the same sizes in a seeded "
        "random order, so a slow drift is not read as a size effect; each size's iterations then come "
        "from the measured size nearest to it (within a factor of 2) or an untimed probe of its own, "
        "and --max-one-way skips the sizes beyond a group that reaches it (default: ascending)",
    )
    add_option(g, "--order-seed", "the seed of --order random (default: one drawn and stored in the file)")
    add_option(
        g,
        "--precision",
        "trials go on past --trials until the 95%% confidence interval of the size's mean trial time "
        "(t-distribution, rank 0's pair) is within P of the mean, e.g. 1%% or 0.01, or until "
        "--precision-cap or --max-trials (default: none, --trials trials per size)",
    )
    add_option(
        g,
        "--precision-cap",
        "with --precision: seconds a size's trials may take, from its first trial's start "
        "(default: 10 x --trials x --target-time)",
    )
    add_option(g, "--max-trials", "with --precision: the most trials of a size (default: 100)")
    g.add_argument(
        "--max-one-way",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="stop the sweep, as NetPIPE 3.7 does (STOPTM), after the first group of sizes n-p, n, n+p "
        "whose last size's one-way time (best trial; a stream's time per message, bidir's per "
        f"exchange) reaches this (default: {DEFAULT_MAX_ONE_WAY_S:g} s, NetPIPE's STOPTM)",
    )
    g.add_argument(
        "--max-round-trip",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="the former name, still accepted and still a round-trip limit: it sets --max-one-way "
        "to SECONDS/2, so a script that gave it keeps its ping-pong's limit (now tested, as NetPIPE "
        "does, after each group of sizes n-p, n, n+p; default: --max-one-way's)",
    )


def _add_mode_options(p: argparse.ArgumentParser) -> None:
    """Mode: what moves during an iteration, pairs, pre-posting, cache, buffers, huge pages."""
    g = p.add_argument_group("mode (what moves during an iteration)")
    add_option(
        g,
        "--mode",
        one_or_other(f"'{m.name}' ({m.help_note})" for m in MODE_TABLE.values()) + " (default: %(default)s)",
    )
    add_option(
        g,
        "--window",
        f"stream mode: messages per iteration before the acknowledgement (default: {DEFAULT_WINDOW}, "
        "as osu_bw); bidir mode: messages each way per iteration (default: 1, NetPIPE -2; 64 as "
        "osu_bibw)",
    )
    g.add_argument(
        "--pairs",
        type=_pairs,
        default=1,
        metavar="N|all",
        help="pairs measured at once: pair i is rank i with rank n-1-i of the n ranks that do not "
        "sample power (NetPIPE 5), across nodes when there are several; 'all' uses every such rank. "
        "The aggregate is reported, each pair's times are stored (default: %(default)s)",
    )
    g.add_argument(
        "--async",
        dest="async_",
        action="store_true",
        help="pre-post receives (MPI_Irecv) before the other side sends (NetPIPE -a)",
    )
    g.add_argument(
        "--cache-cold",
        action="store_true",
        help="every iteration uses another region of a large buffer pool, so messages come from "
        "memory, not cache (NetPIPE -I, IMB -off_cache)",
    )
    g.add_argument(
        "--cache-pool",
        type=_size,
        default=None,
        metavar="SIZE",
        help="with --cache-cold: bytes of each send and receive pool per rank; make it larger than the "
        "last-level cache (default: 64M, at least two of the largest message)",
    )
    g.add_argument(
        "--buffers",
        default=None,
        metavar="ARRANGEMENT",
        help="'netpipe': one buffer per size, 16 KiB-aligned, sent from and received into, so the "
        "reflector returns what it received (NetPIPE's default); 'separate': send from one buffer, "
        "receive into another, both kept for the whole run, each message of a window in its own "
        "region (as IMB, and OSU's -b multiple); 'osu': as separate, but every message of a window "
        "sent from one region and received into one (osu_bw's and osu_bibw's default, -b single: "
        "receives pending into one buffer are outside MPI's rules; for comparison with OSU's "
        "figures). Over single-copy shared memory they differ by up to 2-3x "
        "(docs/netpipe-comparison.md) (default: netpipe for a plain ping-pong; separate with --mode "
        "stream or bidir, --async or --cache-cold, where one buffer would be sent from while a "
        "receive into it is pending, which MPI forbids, or where NetPIPE too uses separate buffers)",
    )
    g.add_argument(
        "--huge-pages",
        default=HUGE_PAGES_SYSTEM,
        metavar="CHOICE",
        help="message buffers on transparent huge pages: 'system' (no advice: the kernel's policy "
        "decides, as for an application's malloc), 'on' (huge-page aligned, MADV_HUGEPAGE) or 'off' "
        "(MADV_NOHUGEPAGE); what the kernel gave is stored per size (default: %(default)s)",
    )


def _add_kernel_options(p: argparse.ArgumentParser) -> None:
    """Kernel and checks: the timed loop, --integrity, the MPI thread level."""
    g = p.add_argument_group("kernel and checks")
    add_option(
        g,
        "--kernel",
        "timed loop: "
        + one_or_other(f"'{name}' ({note})" for name, note in KERNEL_NOTES.items())
        + " (default: %(default)s)",
    )
    g.add_argument(
        "--integrity",
        action="store_true",
        help="verify every message, not only the last of each size (slower: the run is "
        "marked as not comparable for timing)",
    )
    g.add_argument(
        "--thread-level",
        default=THREAD_LEVEL_AUTO,
        metavar="LEVEL",
        help="MPI thread support each rank asks for: 'auto' (MPI_THREAD_SINGLE on ranks that run no "
        "other thread, as NetPIPE; MPI_THREAD_FUNNELED on power ranks, whose meter threads never call "
        "MPI), or single, funneled, serialized, multiple for every rank; some libraries add a "
        "few tens of ns per message above single. The level each rank got is stored (default: %(default)s)",
    )
    add_option(
        g,
        "--stall-timeout",
        "end the run when a measuring rank stops answering (stopped, stuck, its node down): "
        f"after max(SECONDS, {STALL_FACTOR:g} x what the step in progress should take) without "
        "progress, rank 0 names the rank, marks the file failed with every completed size and ends "
        "every rank; 0: wait for ever (default: %(default)g s)",
    )


def _add_power_options(p: argparse.ArgumentParser) -> None:
    """Power: the meters (shared with calibrate), baseline and calibration."""
    g = p.add_argument_group("power (one extra rank per node samples that node's meters)")
    add_option(
        g,
        "--meter",
        "a meter channel of every node, KIND[:TARGET,key=value,...]; repeat for several. "
        f"Kinds: {kinds_text()} (see docs/meters.md; `python -m npmpi meters` shows what works here). "
        "NPMPI_METERS='spec;spec' in a node's environment overrides it on that node (default: none, "
        "no power measured)",
    )
    add_option(
        g,
        "--sample-interval",
        "seconds between samples (default: each meter's natural period, e.g. 1 s for a "
        "Watts Up?, 0.1 s for RAPL)",
    )
    add_option(
        g,
        "--baseline",
        f"idle power recorded before and after the sweep while every rank waits asleep; 0 "
        f"turns off the one before (the one after still covers the meters' delay) "
        f"(default: {DEFAULT_BASELINE_S:g} s when a meter is given)",
    )
    add_option(
        g,
        "--meter-optional",
        "go on without a meter that cannot be opened (recorded in the file) instead of "
        "stopping with an error",
    )
    add_option(
        g,
        "--fabric-meter",
        "a meter of a device that belongs to no node (a switch, a PDU feeding several nodes), "
        "same SPEC syntax as --meter; repeat for several. Sampled by one power rank, stored under "
        "/power/fabric and reported as the fabric's energy per bit (needs --meter: see docs/power.md; "
        "default: none)",
    )
    add_option(
        g,
        "--fabric-rank",
        "the power rank that samples the --fabric-meter devices (default: the first node's)",
    )
    add_option(
        g,
        "--calibration",
        "meter delays measured by `python -m npmpi calibrate` (JSON); stored in the run file "
        "and applied by npmpi-analyze (default: none, delays of 0 s)",
    )


def _add_output_options(p: argparse.ArgumentParser) -> None:
    """Output: the run file, --force, --quiet."""
    g = p.add_argument_group("output")
    add_option(
        g,
        "--output",
        "run file to write (default: runs/npmpi-YYYYmmdd-HHMMSS[-jobID].h5, never an existing "
        "name; runs/ is created with a .gitignore)",
    )
    g.add_argument(
        "--np-out",
        default=None,
        metavar="FILE",
        help="also write NetPIPE's np.out as the run goes, as NPopenmpi does: bytes, Mbps (NetPIPE's "
        "2^20 bit/s), seconds of one message (default: none; npmpi-analyze --np-out writes it later)",
    )
    add_options(
        g,
        {"--force": "overwrite an existing --output or --np-out file", "--quiet": "print nothing but errors"},
    )


def build_parser() -> argparse.ArgumentParser:
    """The parser of `python -m npmpi`, one function per option group."""
    prog = command_name()
    width = max(len(name) for name, _ in SUBCOMMANDS)
    p = command_parser(
        prog,
        "Sweep message sizes with an MPI ping-pong (NetPIPE's method) and write every trial to one "
        f"HDF5 run file. Launch with two or more ranks: mpirun -np 2 {prog}. "
        "Sizes accept suffixes K, M, G (powers of two).",
        epilog=f"subcommands ({prog} SUBCOMMAND …, each with its own --help):\n"
        + "\n".join(f"  {name:<{width}}  {what}" for name, what in SUBCOMMANDS),
        allow_abbrev=False,
    )
    _add_size_options(p)
    _add_repetition_options(p)
    _add_mode_options(p)
    _add_kernel_options(p)
    add_protocol_options(p)
    _add_power_options(p)
    _add_output_options(p)
    return p
