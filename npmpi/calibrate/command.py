"""`python -m npmpi calibrate`: measure each node's meter delay under a known load.

Under mpirun/srun with one power rank per node (as a normal run), every other rank runs the load:
numpy matrix multiplies during the schedule's bursts, sleep in between, all ranks starting
together. Rank 0 then lines each node's power trace up with the schedule (npmpi.power.delayfit) and
prints and stores the delays in a calibration file (npmpi/power/calibration.py).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import time
from dataclasses import replace

import numpy as np

from npmpi.core.errors import UsageError
from npmpi.core.layout import Layout, Words
from npmpi.core.safetext import printable
from npmpi.kinds.kind import Kind
from npmpi.power.calibration import CALIBRATION_FORMAT, CALIBRATION_VERSION
from npmpi.power.delayfit import (
    DEFAULT_BURST_MAX_S,
    DEFAULT_BURST_MIN_S,
    DEFAULT_DURATION_S,
    DEFAULT_MAX_DELAY_S,
    DelayEstimate,
    LoadSchedule,
    estimate_delay,
    make_schedule,
)


def build_parser() -> argparse.ArgumentParser:
    from npmpi.commands.parser import add_options, command_name, command_parser, count_arg, seconds_arg
    from npmpi.persize.watchdog import STALL_FACTOR

    p = command_parser(
        f"{command_name()} calibrate",
        "Measure how long each node's meter takes to report the power drawn: the ranks other than "
        "the power ranks run a pseudo-random on/off compute load while the power ranks sample; the "
        "shift that best lines the power up with the load is the meter's delay. Launch like a run: "
        "mpirun -np 3 python -m npmpi calibrate --meter SPEC.",
        allow_abbrev=False,
    )
    add_options(
        p,
        {
            "--meter": "meter channel(s) of every node, as for a run (NPMPI_METERS overrides per node; "
            "default: none)",
            "--meter-optional": "go on without meters that cannot be opened",
            "--sample-interval": "seconds between samples (default: each meter's natural period)",
        },
    )
    p.add_argument(
        "--duration",
        type=seconds_arg,
        default=DEFAULT_DURATION_S,
        metavar="SECONDS",
        help="length of the load sequence (default: %(default)s s)",
    )
    p.add_argument(
        "--burst-min",
        type=seconds_arg,
        default=DEFAULT_BURST_MIN_S,
        metavar="SECONDS",
        help="shortest load or idle burst (default: %(default)s s)",
    )
    p.add_argument(
        "--burst-max",
        type=seconds_arg,
        default=DEFAULT_BURST_MAX_S,
        metavar="SECONDS",
        help="longest load or idle burst (default: %(default)s s)",
    )
    p.add_argument(
        "--seed", type=count_arg, default=1, help="seed of the pseudo-random sequence (default: 1)"
    )
    p.add_argument(
        "--max-delay",
        type=seconds_arg,
        default=DEFAULT_MAX_DELAY_S,
        metavar="SECONDS",
        help="largest delay searched (default: %(default)s s)",
    )
    p.add_argument(
        "--matrix",
        type=count_arg,
        default=256,
        metavar="N",
        help="size of the N x N matrices multiplied during load bursts (default: %(default)s)",
    )
    add_options(
        p,
        {
            "--output": "calibration file to write (JSON; default "
            "runs/npmpi-calibration-YYYYmmdd-HHMMSS.json)",
            "--force": "overwrite an existing --output",
            "--quiet": "print nothing but errors",
            "--stall-timeout": "end the calibration when a load rank stops answering (stopped, stuck, "
            f"its node down): after max(SECONDS, {STALL_FACTOR:g} x --burst-max) past the load's end "
            "without it, rank 0 names the rank, writes nothing and ends every rank; 0: wait for ever "
            "(default: %(default)g s)",
        },
    )
    return p


def parse_calibrate_options(argv: list[str]) -> argparse.Namespace:
    from npmpi.commands.checks import check_stall_timeout, meter_specs
    from npmpi.commands.parser import parse_command_line

    ns = parse_command_line(build_parser(), argv)
    ns.meter = meter_specs(ns.meter)
    ns.stall_timeout = check_stall_timeout(ns.stall_timeout)
    if not 5 <= ns.duration <= 3600:
        raise UsageError(f"--duration {ns.duration}: give between 5 and 3600 s")
    if not 0.1 <= ns.burst_min <= ns.burst_max:
        raise UsageError(f"--burst-min {ns.burst_min} / --burst-max {ns.burst_max}: need 0.1 <= min <= max")
    if ns.burst_max * 4 > ns.duration:
        raise UsageError(
            f"--duration {ns.duration} s is too short for bursts up to {ns.burst_max} s: "
            "give at least 4 bursts"
        )
    if not 0 < ns.max_delay <= 60:
        raise UsageError(f"--max-delay {ns.max_delay}: give between 0 and 60 s")
    if not 0 <= ns.seed < 2**32:
        raise UsageError(f"--seed {ns.seed}: give a whole number from 0 to {2**32 - 1}")
    if not 16 <= ns.matrix <= 8192:
        raise UsageError(f"--matrix {ns.matrix}: give between 16 and 8192")
    if ns.sample_interval is not None and not 0.001 <= ns.sample_interval <= 60:
        raise UsageError(f"--sample-interval {ns.sample_interval}: give between 0.001 and 60 s")
    return ns


def run_load(schedule: LoadSchedule, matrix: int, start_mono: float) -> None:
    """Compute during the schedule's bursts, sleep between them (times from `start_mono`)."""
    a = np.random.default_rng(0).random((matrix, matrix))
    b = a.copy()
    for k, level in enumerate(schedule.levels):
        end = start_mono + schedule.edges_s[k + 1]
        if level:
            while time.monotonic() < end:
                np.matmul(a, b, out=a)
                a *= 1.0 / matrix  # keep values bounded
        else:
            delay = end - time.monotonic()
            if delay > 0:
                time.sleep(delay)


class CalibrateKind(Kind):
    """`python -m npmpi calibrate`: one measuring group, the load ranks (every rank but the power
    ranks, rank 0 among them), whose group communicator starts the load together; rank 0 measures
    and writes the calibration (a JSON file, not a run file)."""

    name = "calibrate"
    member_role = "load"
    words = Words(
        needs="calibrate needs a rank to run the load",
        takes_part="run the load",
        least=1,
        command="python -m npmpi calibrate --meter …",
    )
    stop_signals = False

    def parse(self, argv: list[str]) -> argparse.Namespace:
        ns = parse_calibrate_options(argv)
        # the options every kind shares, under their shared names (npmpi/kinds/command.py)
        ns.meters, ns.sample_interval_s, ns.thread_level = ns.meter, ns.sample_interval, "auto"
        ns.fabric_meters, ns.fabric_rank, ns.calibration = (), None, None
        return ns

    def thread_level(self, ns) -> str:
        return "funneled"

    def who(self, rank: int, host: str) -> str:
        return f"calibration failed on rank {rank}"

    def groups(self, layout: Layout, ns) -> Layout:
        """The load ranks, with a meter on every node and a load rank beside each node's power rank."""
        if not layout.power_ranks:
            raise UsageError("calibrate needs a meter: give --meter SPEC (or NPMPI_METERS on every node)")
        load = layout.capable
        loaded = {layout.node_of_rank[r] for r in load}
        missing = [n for n in range(layout.node_count) if n not in loaded]
        if missing:
            raise UsageError(
                f"node {missing[0]} has no rank besides its power rank to run the load: give every node 2 "
                "or more ranks"
            )
        roles = tuple(self.member_role if r in load else role for r, role in enumerate(layout.roles))
        return replace(layout, roles=roles, groups=(tuple(load),))

    def prepare_output(self, ns, agreed) -> str | None:
        """Rank 0's calibration file reserved now (its temporary created), not after the measurement."""
        from npmpi.core.outpath import default_directory, reserve_output

        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        try:
            output = ns.output or os.path.join(default_directory(), f"npmpi-calibration-{stamp}.json")
            agreed.reservation = reserve_output(output, ns.force)
        except UsageError as exc:
            return str(exc)
        return None

    def record(self, MPI, comm, ns, argv: list[str], agreed, stop) -> None:
        return None  # rank 0 runs the load with the others, then measures (serve)

    def serve(self, MPI, comm, ns, agreed, stop) -> int:
        """A load rank; rank 0 then measures and writes the file."""
        from npmpi.core.outpath import release

        try:
            layout = agreed.roles.layout
            return _load_and_measure(
                comm, agreed.group_comm, ns, layout, agreed.gathered_power, agreed.reservation
            )
        except BaseException:  # the job ends with one message (npmpi.commands.sequence): no file left
            if agreed.reservation is not None:
                release(agreed.reservation)
            raise


KIND = CalibrateKind()


def main(argv: list[str]) -> int:
    from npmpi.kinds.command import kind_command

    return kind_command(KIND).run(argv)


def _load_and_measure(comm, load_comm, ns, layout, gathered, output) -> int:
    from npmpi.power.rank import PowerCollector

    rank = comm.Get_rank()
    schedule = make_schedule(ns.duration, ns.burst_min, ns.burst_max, ns.seed)
    collector = None
    offsets_start = None
    if rank == 0:
        power_nodes = [gathered[r] for r in layout.power_ranks]
        collector = PowerCollector(comm, list(layout.power_ranks), [p["channels"] for p in power_nodes])
        offsets_start = collector.clock_offsets()
        if not ns.quiet:
            print(
                f"calibrating {sum(len(p['channels']) for p in power_nodes)} meter channel(s) on "
                f"{layout.node_count} node(s): {len(schedule.levels)} bursts over "
                f"{schedule.duration_s:.0f} s "
                f"with {load_comm.Get_size()} load rank(s)",
                flush=True,
            )
        collector.collect()  # drop what was sampled before the load starts
        collector.kept.clear()
    _load_done(comm, ns, layout, output, "start")  # a rank stopped before the start is named too
    load_comm.Barrier()
    start_wall, start_mono = time.time(), time.monotonic()
    run_load(schedule, ns.matrix, start_mono)
    # let the meters report the last bursts before collecting
    time.sleep(min(ns.max_delay, 5.0) + 1.0)
    _load_done(comm, ns, layout, output)
    load_comm.Barrier()
    load_comm.Free()
    if rank != 0:
        return 0
    collector.collect()
    offsets_end = collector.clock_offsets()
    from npmpi.power.clocksync import interpolate_offset

    results = []
    for node, info in enumerate(power_nodes):
        for channel, desc in enumerate(info["channels"]):
            batches = collector.kept.get((node, channel), [])
            t = np.concatenate([b[0]["time_unix_s"] for b in batches]) if batches else np.zeros(0)
            w = np.concatenate([b[0]["power_w"] for b in batches]) if batches else np.zeros(0)
            t_rank0 = t - interpolate_offset(offsets_start[node], offsets_end[node], t)
            est = estimate_delay(t_rank0 - start_wall, w, schedule, ns.max_delay)
            results.append(
                _result_row(
                    node,
                    layout.hosts[layout.power_ranks[node]],
                    channel,
                    desc,
                    est,
                    offsets_start[node].uncertainty_s,
                )
            )
    for r in results:  # a power rank given up on (frozen): its node's delay is not known
        if layout.power_ranks[r["node"]] in collector.lost:
            r.update(delay_s=None, uncertainty_s=None, reason="its power rank stopped answering")
    collector.stop_all(0)
    document = {
        "format": CALIBRATION_FORMAT,
        "version": CALIBRATION_VERSION,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "duration_s": schedule.duration_s,
        "burst_min_s": ns.burst_min,
        "burst_max_s": ns.burst_max,
        "seed": ns.seed,
        "load_ranks": comm.Get_size() - len(layout.power_ranks),
        "results": results,
    }
    write_reserved(output, json.dumps(document, indent=2) + "\n")
    if not ns.quiet:
        print(format_table(results))
        print(
            printable(
                f"calibration written to {output.target}; use it with: "
                f"python -m npmpi --calibration {output.target} …"
            )
        )
    collector.end_job_if_lost(1)
    return 0


def _load_done(comm, ns, layout, output, stage: str = "end") -> None:
    """Each load rank tells rank 0 it is at the load's start or that its load is over; rank 0 waits
    for each under the stall watchdog, so that a stopped load rank is named instead of hanging the
    barrier there (loadstall.py)."""
    from npmpi.calibrate.loadstall import say_done, wait_for_load_ranks

    if comm.Get_rank() != 0:
        say_done(comm, stage)
        return
    ranks = [r for r in range(1, comm.Get_size()) if r not in layout.power_ranks]
    wait_for_load_ranks(comm, ranks, ns.stall_timeout, ns.burst_max, layout.hosts, output, stage)


def write_reserved(res, text: str) -> None:
    """Write the calibration into the temporary file reserved at start-up, then give it its name: an
    existing file is replaced only with --force, and a crash never leaves a half-written file."""
    from npmpi.core.outpath import publish, release, write_whole

    try:
        write_whole(res, text.encode())
        publish(res)
    except OSError as exc:
        raise UsageError(f"--output {res.target}: cannot be written ({exc.strerror or exc})") from None
    finally:
        release(res)


def _result_row(node: int, host: str, channel: int, desc: dict, est: DelayEstimate, clock_unc: float) -> dict:
    unc = est.uncertainty_s
    if unc is not None:
        unc = math.hypot(unc, clock_unc)  # the node's clock offset is uncertain too
    return {
        "node": node,
        "host": host,
        "channel": channel,
        "kind": desc.get("kind"),
        "spec": desc.get("spec"),
        "label": desc.get("label"),
        "sample_interval_s": desc.get("sample_interval_s"),
        "delay_s": est.delay_s,
        "uncertainty_s": unc,
        "quality": est.quality,
        "samples": est.samples,
        "reason": est.reason,
    }


def format_table(results: list[dict]) -> str:
    lines = [
        f"{'node':>4s} {'host':16s} {'meter':24s} {'delay (s)':>10s} {'± (s)':>7s} {'quality':>8s}  note"
    ]
    for r in results:
        delay = f"{r['delay_s']:.3f}" if r["delay_s"] is not None else "-"
        unc = f"{r['uncertainty_s']:.3f}" if r["uncertainty_s"] is not None else "-"
        lines.append(
            f"{r['node']:4d} {r['host'][:16]:16s} {str(r['spec'])[:24]:24s} {delay:>10s} {unc:>7s} "
            f"{r['quality']:8.3f}  {r['reason'] or r['label']}"
        )
    return "\n".join(lines)
