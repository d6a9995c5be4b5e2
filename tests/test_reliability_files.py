"""Bad run files: npmpi-analyze never shows a traceback, never hangs, never runs what a file holds.

A seeded numpy generator makes corrupted copies of a small writer-made run file (the schema a real
run writes: attributes, layout, 24 sizes, a power node with samples and faults): truncated at
random offsets, bit flips and overwritten bytes, missing or mistyped datasets, groups and
attributes, wrong shapes, NaN/inf/negative values, huge claimed sizes, links in place of data.
Each expectation is one of:

- partial: a run cut short (status running, rows or samples partly written): exit 0 and a notice;
- error: exit 1 and an `npmpi-analyze: error:` line naming the problem;
- any: exit 0 or 1 (a flipped bit may land in a value or in unused bytes), never a traceback nor
  an "internal error"; exit 1 comes with an error line naming the file.

The analysis runs in this process (npmpi_analysis.cli.main) with a time limit per call; a
handful run as `python -m npmpi_analysis`. Outputs are never overwritten without --force and
are written under a temporary name first; files holding code or pickles stay data.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest

from npmpi.core.errors import RunFileError
from npmpi.core.schedule import netpipe_schedule
from npmpi.runfile.attrseal import seal_all
from npmpi.runfile.format import SAMPLE_FIELDS, TEXT_CHECKSUM, SizeResult, text_crc32
from npmpi.runfile.reader import load_run
from npmpi.runfile.writer import RunWriter

REPO = Path(__file__).resolve().parents[1]
CALL_LIMIT_S = 30  # per analysis; a good file takes well under a second
ROWS = 24
T0 = 1.7e9
MUTATION_SEED = 7400

# --------------------------------------------------------------------------- the base file


def write_base(path: Path, rows: int = ROWS, status: str = "complete") -> Path:
    """A run file as `mpirun -np 3 python -m npmpi --quick --meter estimate` writes it."""
    attrs = {
        "npmpi_version": "0.1.0",
        "created_utc": "2024-01-01T00:00:00+00:00",
        "command_line": "python -m npmpi --quick --meter estimate",
        "argv": ["--quick", "--meter", "estimate"],
        "options_json": {"trials": 3, "lower_bytes": 1, "upper_bytes": 1 << 20},
        "mode": "pingpong",
        "kernel": "python",
        "timing_comparable": True,
        "world_size": 3,
        "node_count": 1,
        "pair_ranks": [0, 1],
        "pair_crosses_nodes": False,
        "mpi_library_version": "Open MPI v5.0.11",
        "mpi_standard_version": "3.1",
        "platform": "Linux",
        "python_version": "3.11.7",
        "clock_name": "perf_counter",
        "clock_resolution_s": 1e-9,
        "clock_smallest_step_s": 1e-8,
        "clock_read_cost_s": 5e-8,
        "slurm_job_id": "",
        "stopped_early": "",
    }
    layout = {"host": ["vm"] * 3, "node_index": [0, 0, 0], "role": ["transmitter", "reflector", "power"]}
    w = RunWriter(path, attrs, layout, 3)
    w.create_power(
        {"baseline_requested_s": 0.5, "sample_interval_requested_s": "natural"},
        [{"host": "vm", "node_index": 0, "power_rank": 2, "meter_specs": ["estimate"], "meters_skipped": ""}],
        [
            [
                {
                    "kind": "estimate",
                    "spec": "estimate",
                    "description": "CPU-time model",
                    "label": "estimated",
                    "natural_interval_s": 0.01,
                    "sample_interval_s": 0.01,
                    "quantities": ["power_w"],
                }
            ]
        ],
    )
    w.set_group_attrs("power", baseline_start_unix_s=T0 - 0.6, baseline_end_unix_s=T0 - 0.1)
    w.set_group_attrs(
        "power/node0",
        clock_offset_start_s=1e-5,
        clock_offset_start_uncertainty_s=1e-6,
        clock_offset_start_round_trip_s=2e-6,
        clock_offset_start_measured_unix_s=T0 - 1,
    )
    t = T0
    for size in [p.size_bytes for p in netpipe_schedule(1, 1 << 20, 3)][:rows]:
        trial_s = [1e-3 * (1 + 0.01 * j) * (1 + size / 1e5) for j in range(3)]
        starts, ends = [], []
        for x in trial_s:
            starts.append(t)
            t += x
            ends.append(t)
            t += 1e-4
        w.append(SizeResult(size, 100, 10, trial_s, starts, ends, True))
    times = np.arange(T0 - 0.6, t + 0.2, 0.01)
    nan = np.full(len(times), np.nan)
    w.append_samples(
        0,
        0,
        {
            "time_unix_s": times,
            "power_w": 60 + 10 * np.sin(times),
            "energy_j": nan,
            "volts": nan,
            "amps": nan,
        },
        [(T0 + 0.01, "no reading for 5 sample intervals"), (T0 + 0.02, "readings resumed after a stall")],
    )
    w.set_group_attrs(
        "power/node0",
        clock_offset_end_s=2e-5,
        clock_offset_end_uncertainty_s=1e-6,
        clock_offset_end_round_trip_s=2e-6,
        clock_offset_end_measured_unix_s=t + 0.1,
    )
    w.finish(status, "" if status == "complete" else f"{status} on purpose")
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_base(tmp_path_factory.mktemp("base") / "base.h5")


# --------------------------------------------------------------------------- the generator

CHANNEL = "power/node0/channel0"
PINGPONG = ["pingpong/" + n for n in ("size_bytes", "iterations", "warmup_iterations", "trial_s")] + [
    "pingpong/trial_start_unix_s",
    "pingpong/trial_end_unix_s",
    "pingpong/data_verified",
]
REQUIRED = ["layout", "pingpong", *PINGPONG]
POWER_DATA = [f"{CHANNEL}/{n}" for n in SAMPLE_FIELDS]
CORRUPT = ("truncated or corrupt", "not an HDF5 file", "cannot be opened", "cannot be read", "damaged")
WEIRD_ATTRS = [
    np.nan,
    np.inf,
    -1,
    10**15,
    "garbage",
    b"\xff\xfe not utf-8",
    np.array([1, 2, 3]),
    np.array([[1.0, 2.0]]),
    True,
    "9" * 1000,
]


@dataclass
class Mutation:
    name: str
    expect: str  # partial | error | any
    fragments: tuple[str, ...] = ()  # for error: one must be in the error lines


def _rewrite(f, name: str, data=None, **create) -> None:
    del f[name]
    if data is not None:
        f.create_dataset(name, data=data, **create)
    else:
        f.create_dataset(name, **create)


def _bytes_mutation(path: Path, rng, kind: str) -> str:
    data = bytearray(path.read_bytes())
    size = len(data)
    if kind == "truncate":
        cut = int(rng.integers(0, size))
        path.write_bytes(bytes(data[:cut]))
        return f"truncated at {cut} of {size} bytes"
    if kind == "bitflip":
        flips = int(rng.integers(1, 33))
        for at in rng.integers(0, size, flips):
            data[int(at)] ^= 1 << int(rng.integers(0, 8))
        path.write_bytes(bytes(data))
        return f"{flips} bits flipped"
    at, length = int(rng.integers(0, size)), int(rng.integers(1, 4097))
    data[at : at + length] = rng.integers(0, 256, min(length, size - at), dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return f"{length} random bytes at {at}"


def mutate(base: Path, dst: Path, rng, kind: str) -> Mutation:
    """Copy `base` to `dst` and damage it as `kind` says (with random details from `rng`)."""
    shutil.copy(base, dst)
    if kind == "truncate":
        return Mutation(_bytes_mutation(dst, rng, kind), "error", CORRUPT)
    if kind in ("bitflip", "overwrite"):
        return Mutation(_bytes_mutation(dst, rng, kind), "any")
    pick = lambda items: items[int(rng.integers(len(items)))]  # noqa: E731
    with h5py.File(dst, "r+") as f:
        if kind == "missing":
            name = pick(REQUIRED)
            del f[name]
            return Mutation(f"{name} deleted", "error", (f"/{name} is missing",))
        if kind == "missing-power":
            name = pick([*POWER_DATA, f"{CHANNEL}/faults/message", f"{CHANNEL}/faults/time_unix_s"])
            del f[name]
            return Mutation(f"{name} deleted", "error", (f"/{name}", "/power"))
        if kind == "missing-attr":
            owner = pick(["/", "/power", "/power/node0", f"/{CHANNEL}", "/pingpong"])
            key = pick(list(f[owner].attrs))
            del f[owner].attrs[key]
            if owner == "/" and key in ("format", "format_version"):
                return Mutation(f"attribute {key} deleted", "error", ("format",))
            return Mutation(f"attribute {owner}@{key} deleted", "any")
        if kind == "attr":
            owner = pick(["/", "/power", "/power/node0", f"/{CHANNEL}", "/pingpong"])
            key = pick(list(f[owner].attrs))
            value = pick(WEIRD_ATTRS)
            f[owner].attrs[key] = value
            if owner == "/" and key in ("format", "format_version"):
                return Mutation(f"attribute {key} = {value!r:.30}", "error", ("format",))
            return Mutation(f"attribute {owner}@{key} = {value!r:.30}", "any")
        if kind == "mistype":
            name = pick(PINGPONG + POWER_DATA)
            choice = int(rng.integers(3))
            shape = f[name].shape
            if choice == 0:
                _rewrite(f, name, np.array([b"text"] * shape[0]))
            elif choice == 1:
                _rewrite(f, name, np.zeros(shape, dtype=[("a", "f8"), ("b", "i4")]))
            else:
                _rewrite(f, name, np.zeros(shape, dtype=np.complex128))
            return Mutation(f"{name} mistyped ({choice})", "error", (f"/{name}",))
        if kind == "shape":
            name = pick(PINGPONG + POWER_DATA)
            choice = int(rng.integers(3))
            if choice == 0:
                _rewrite(f, name, np.zeros((3, 4, 5)))
            elif choice == 1:
                _rewrite(f, name, 7.0)
            else:
                _rewrite(f, name, np.zeros((ROWS, 17)))
            return Mutation(f"{name} reshaped ({choice})", "error", (f"/{name}", "trials, others"))
        if kind == "values":
            name, value, frag = pick(
                [
                    ("pingpong/size_bytes", -1, "below 1 byte"),
                    ("pingpong/iterations", 0, "below 1"),
                    ("pingpong/iterations", -5, "below 1"),
                    ("pingpong/trial_s", -1.0, "non-positive"),
                    ("pingpong/trial_s", 0.0, "non-positive"),
                    ("pingpong/trial_s", np.inf, "infinite"),
                    ("pingpong/trial_s", -np.inf, "infinite"),
                ]
            )
            row = int(rng.integers(ROWS))
            data = f[name][()]
            data[row] = value
            f[name][...] = data
            return Mutation(f"{name}[{row}] = {value}", "error", (frag,))
        if kind == "nan-row":
            row = int(rng.integers(ROWS))
            data = f["pingpong/trial_s"][()]
            data[row, :] = np.nan
            f["pingpong/trial_s"][...] = data
            return Mutation(f"trial_s row {row} all NaN", "error", ("no finite trial time",))
        if kind == "power-values":
            name = pick([f"{CHANNEL}/power_w", f"{CHANNEL}/time_unix_s"])
            value = pick([np.nan, np.inf, -np.inf, -1.0, 0.0, 1e300])
            data = f[name][()]
            data[rng.integers(0, len(data), int(rng.integers(1, 6)))] = value
            f[name][...] = data
            return Mutation(f"{name} holds {value}", "any")
        if kind == "huge":
            name = pick(PINGPONG + POWER_DATA + [f"{CHANNEL}/faults/message", "layout/host"])
            claimed = int(10 ** rng.uniform(6, 15.5))
            ds = f[name]
            shape, dtype = (claimed, *ds.shape[1:]), ds.dtype
            _rewrite(
                f, name, shape=shape, maxshape=(None, *shape[1:]), chunks=(1024, *shape[1:]), dtype=dtype
            )
            if rng.random() < 0.5:
                f.attrs["sizes_completed"] = claimed
            return Mutation(f"{name} claims {claimed:.3g} rows", "error", (f"/{name}",))
        if kind == "swap":
            name = pick([*PINGPONG, *POWER_DATA, "layout", "pingpong", "power", "power/node0", CHANNEL])
            was_group = isinstance(f[name], h5py.Group)
            del f[name]
            if was_group:
                f.create_dataset(name, data=np.arange(5.0))
            else:
                f.create_group(name)
            return Mutation(f"{name} swapped", "error", (f"/{name}",))
        if kind == "link":
            name = pick([*PINGPONG, *POWER_DATA, "layout", "pingpong", CHANNEL])
            del f[name]
            if rng.random() < 0.5:
                f[name] = h5py.SoftLink("/nowhere")
            else:
                f[name] = h5py.ExternalLink("/etc/passwd", "/x")
            return Mutation(f"{name} made a link", "error", (f"/{name}",))
        if kind == "analysis-values":  # what once crashed the analysis (issue 15): refused at load
            what = pick(["sizes-zero", "trial-huge", "factor", "divisor", "options-nested"])
            if what == "sizes-zero":
                f["pingpong/size_bytes"][...] = 0
                return Mutation("every size_bytes 0", "error", ("below 1 byte",))
            if what == "trial-huge":
                f["pingpong/trial_s"][...] = 1e308
                return Mutation("every trial_s 1e308", "error", ("impossible",))
            if what == "options-nested":
                depth = int(rng.integers(1000, 200_000))
                f.attrs["options_json"] = "[" * depth + "]" * depth
                return Mutation(f"options_json nested {depth} deep", "error", ("nested",))
            key = "bytes_per_iteration_factor" if what == "factor" else "one_way_divisor"
            value = pick([np.inf, -np.inf, np.nan, 0, -2, 0.5, 1e300, "two"])
            f.attrs[key] = value
            return Mutation(f"{key} = {value!r}", "error", (key,))
        if kind == "hostile-text":  # terminal escapes in what the analysis prints: shown escaped
            key = pick(["status_message", "kernel", "command_line", "mpi_library_version"])
            f.attrs[key] = "\x1b[2J\x1b]0;title\x07\x9b31m\u202eevil"
            if key == "status_message":
                f.attrs["status"] = "failed"
            return Mutation(f"escapes in {key}", "any")
        # ---- merely partial: a run cut short
        if kind == "partial-rows":
            keep = int(rng.integers(1, ROWS))
            f.attrs["sizes_completed"] = keep
            f.attrs["status"] = "running"
            return Mutation(f"only {keep} rows completed", "partial")
        if kind == "partial-row-resized":
            name = pick(PINGPONG)
            ds = f[name]
            ds.resize(ds.shape[0] + int(rng.integers(1, 5)), axis=0)  # resized, never written
            return Mutation(f"{name} resized past its data", "partial")
        if kind == "partial-samples":
            name = pick(POWER_DATA)
            ds = f[name]
            ds.resize(ds.shape[0] - int(rng.integers(1, 20)), axis=0)
            return Mutation(f"{name} shorter than the others", "partial")
        if kind == "partial-status":
            status = pick(["running", "interrupted", "failed"])
            f.attrs["status"] = status
            return Mutation(f"status {status}", "partial")
    raise AssertionError(kind)


PLAN = {  # kind: how many files
    "truncate": 40,
    "bitflip": 25,
    "overwrite": 20,
    "missing": 10,
    "missing-power": 8,
    "missing-attr": 12,
    "attr": 15,
    "mistype": 10,
    "shape": 10,
    "values": 12,
    "nan-row": 3,
    "power-values": 8,
    "huge": 15,
    "swap": 10,
    "link": 8,
    "partial-rows": 6,
    "partial-row-resized": 5,
    "partial-samples": 5,
    "partial-status": 4,
    "analysis-values": 16,
    "hostile-text": 4,
}


# --------------------------------------------------------------------------- running the analysis


class CallTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float):
    def expired(signum, frame):
        raise CallTimeout(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def analyze(capsys, *args: str) -> tuple[int, str, str]:
    from npmpi_analysis.cli import main

    capsys.readouterr()
    with time_limit(CALL_LIMIT_S):
        code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_outcome(m: Mutation, path: Path, code: int, out: str, err: str) -> None:
    where = f"{m.name}: exit {code}\n{err}"
    assert "Traceback" not in out + err, where
    assert not re.search("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]", out + err), (
        f"a control character printed: {where}"
    )
    assert "internal error" not in err, where
    errors = [ln for ln in err.splitlines() if ln.startswith("npmpi-analyze: error:")]
    assert code in (0, 1), where
    if code == 1:
        assert errors and all(path.name in ln for ln in errors), where
    if m.expect == "partial":
        assert code == 0, where
        assert any(ln.strip().startswith("notice:") for ln in out.splitlines()), where
    elif m.expect == "error":
        assert code == 1, where
        assert any(frag in ln for ln in errors for frag in m.fragments), where


def test_the_base_file_is_analysed_cleanly(base, capsys):
    code, out, err = analyze(capsys, str(base))
    assert code == 0 and err == "", err
    assert "24 sizes analysed" in out and "notice:" not in out


@pytest.mark.timeout(600)
def test_corrupted_files_in_process(base, tmp_path, capsys):
    rng = np.random.default_rng(MUTATION_SEED)
    results: dict[str, int] = {}
    failures = []
    slowest = 0.0
    count = 0
    for kind, n in PLAN.items():
        for k in range(n):
            path = tmp_path / f"{kind}-{k}.h5"
            m = mutate(base, path, rng, kind)
            t0 = time.monotonic()
            try:
                code, out, err = analyze(capsys, str(path))
                check_outcome(m, path, code, out, err)
            except (AssertionError, CallTimeout) as exc:
                failures.append(f"{path.name} ({m.name}): {exc}")
                code = -1
            slowest = max(slowest, time.monotonic() - t0)
            results[f"{m.expect} exit {code}"] = results.get(f"{m.expect} exit {code}", 0) + 1
            count += 1
            path.unlink()
    with capsys.disabled():  # shown with -s: the figures in docs/reliability.md
        print(f"\n{count} corrupted files: {results}; slowest analysis {slowest:.2f} s")
    assert count >= 200
    assert not failures, f"{len(failures)} of {count} files:\n" + "\n\n".join(failures[:10])


@pytest.mark.timeout(600)
def test_load_run_raises_only_run_file_errors(base, tmp_path):
    """The reader itself: a bad file gives RunFileError naming the file, and nothing else."""
    rng = np.random.default_rng(MUTATION_SEED + 1)
    for kind, n in PLAN.items():
        for k in range(n):
            path = tmp_path / f"{kind}-{k}.h5"
            m = mutate(base, path, rng, kind)
            try:
                with time_limit(CALL_LIMIT_S):
                    run = load_run(path)
            except RunFileError as exc:
                assert path.name in str(exc), (m.name, exc)
                assert m.expect != "partial", (m.name, exc)
            else:
                if m.expect == "partial":
                    assert run.notices, m.name
            path.unlink()


SUBPROCESS_KINDS = ["truncate", "bitflip", "huge", "link", "partial-rows", "values"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", SUBPROCESS_KINDS)
def test_corrupted_files_through_the_command(base, tmp_path, kind):
    rng = np.random.default_rng(MUTATION_SEED + 2 + SUBPROCESS_KINDS.index(kind))
    path = tmp_path / f"{kind}.h5"
    m = mutate(base, path, rng, kind)
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(path)],
        capture_output=True,
        text=True,
        timeout=CALL_LIMIT_S * 4,
        check=False,
    )
    check_outcome(m, path, proc.returncode, proc.stdout, proc.stderr)


def test_a_run_with_no_completed_size_is_an_error_not_a_crash(tmp_path, capsys):
    path = write_base(tmp_path / "empty.h5", rows=0, status="interrupted")
    assert len(load_run(path).pingpong) == 0
    code, out, err = analyze(capsys, str(path))
    assert "Traceback" not in out + err and "internal error" not in err, err
    assert code == 1 and "no completed message size" in err, err


def test_not_a_regular_file_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "run.h5"
    os.mkfifo(fifo)
    code, _out, err = analyze(capsys, str(fifo))  # a pipe has no writer here: reading must not wait
    assert code == 1 and "not a regular file" in err


# --------------------------------------------------------------------------- claims and code


def _limited_memory():
    limit = 4 << 30  # a refused claim allocates nothing; a regression fails instead of swapping
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _claim(base: Path, path: Path, name: str, rows: int) -> Path:
    shutil.copy(base, path)
    parent = name.rsplit("/", 1)[0]
    with h5py.File(path, "r+") as f:
        for full in [f"{CHANNEL}/{n}" for n in SAMPLE_FIELDS] if parent == CHANNEL else [name]:
            ds = f[full]
            shape, dtype = (rows, *ds.shape[1:]), ds.dtype
            _rewrite(
                f, full, shape=shape, maxshape=(None, *shape[1:]), chunks=(4096, *shape[1:]), dtype=dtype
            )
        f.attrs["sizes_completed"] = rows
    return path


HUGE_CLAIMS = [
    (f"{CHANNEL}/power_w", 10**15),  # over MAX_SAMPLES
    (f"{CHANNEL}/power_w", 1_500_000_000),  # under it: 11 GiB per dataset if read
    (f"{CHANNEL}/faults/time_unix_s", 10**15),
    ("pingpong/trial_s", 9_000_000),
    ("layout/host", 9_000_000),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name,rows", HUGE_CLAIMS, ids=[f"{n}-{r:.0e}" for n, r in HUGE_CLAIMS])
def test_huge_claims_are_refused_quickly(base, tmp_path, name, rows):
    path = _claim(base, tmp_path / "huge.h5", name, rows)
    parent = name.rsplit("/", 1)[0]
    assert path.stat().st_size < 10 * base.stat().st_size  # the claim costs the file nothing
    probe = (
        "import sys, time\nfrom npmpi.runfile.reader import load_run\n"
        "from npmpi.core.errors import RunFileError\n"
        "t = time.monotonic()\ntry:\n    load_run(sys.argv[1])\nexcept RunFileError as e:\n"
        "    print(f'{time.monotonic() - t:.3f} {e}')\nelse:\n    print('loaded')\n"
    )
    for cmd in (
        [sys.executable, "-c", probe, str(path)],
        [sys.executable, "-m", "npmpi_analysis", str(path)],
    ):
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=120, check=False, preexec_fn=_limited_memory
        )
        took = time.monotonic() - t0
        assert took < 30, f"{took:.1f} s"
        text = proc.stdout + proc.stderr
        assert "Traceback" not in text and "internal error" not in text and "MemoryError" not in text, text
        assert "loaded" not in proc.stdout.split()
        if "npmpi_analysis" in cmd:
            assert proc.returncode == 1 and "npmpi-analyze: error:" in proc.stderr, text
        assert f"/{parent}" in text, text


PWNED = "pwned"


class _Exploit:
    """Unpickling this would create a file: a run file's bytes must never be unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.timeout(300)
def test_code_and_pickles_in_a_file_stay_data(base, tmp_path, capsys):
    marker = tmp_path / PWNED
    code = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    pickled = np.void(pickle.dumps(_Exploit(marker)))
    path = tmp_path / "hostile.h5"
    shutil.copy(base, path)
    with h5py.File(path, "r+") as f:
        for key in ("options_json", "command_line", "kernel", "status_message", "platform", "mode"):
            f.attrs[key] = code
        f.attrs["argv"] = [code, "--quick"]
        f.attrs["pickled"] = pickled
        f["power/node0/channel0"].attrs["label"] = code
        f["power/node0/channel0"].attrs["meter_delay_s"] = code
        f["power/node0"].attrs["clock_offset_start_s"] = pickled
        f["power"].attrs["baseline_start_unix_s"] = code
        f.create_dataset(
            "pingpong/pickled", data=np.frombuffer(pickle.dumps(_Exploit(marker)), dtype=np.uint8)
        )
        f["layout/host"][0] = code
        f["layout/host"].attrs[TEXT_CHECKSUM] = text_crc32(f["layout/host"][()])  # a forger's own
        seal_all(f)  # and the attributes' (npmpi/runfile/attrseal.py): the values reach the reader
    run = load_run(path)
    assert run.attrs["options_json"] == code and not marker.exists()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    outputs = [
        "--json",
        str(out_dir / "r.json"),
        "--csv",
        str(out_dir / "r.csv"),
        "--report",
        str(out_dir / "r.html"),
    ]
    result, out, err = analyze(capsys, str(path), *outputs)
    assert result in (0, 1) and "Traceback" not in out + err and "internal error" not in err, err
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi_analysis", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr
    assert not marker.exists(), "something in the file was executed"


def test_no_code_execution_primitives_in_the_readers():
    """grep: the reader and the analysis never unpickle, eval or exec what they read."""
    readers = (
        "runfile/format.py",
        "runfile/reader.py",
        "runfile/checks.py",
        "runfile/opening.py",
        "core/inputfiles.py",
    )
    sources = [
        *(REPO / "npmpi" / name for name in readers),
        *sorted((REPO / "analysis" / "npmpi_analysis").rglob("*.py")),
    ]
    forbidden = re.compile(
        r"\b(pickle|marshal|shelve|dill|eval\s*\(|exec\s*\(|__import__|literal_eval|yaml\.load|"
        r"allow_pickle\s*=\s*True|os\.system|subprocess)"
    )
    hits = [
        f"{src.relative_to(REPO)}:{i}: {line.strip()}"
        for src in sources
        for i, line in enumerate(src.read_text().splitlines(), 1)
        if forbidden.search(line.split("#", 1)[0])
    ]
    assert hits == []


# --------------------------------------------------------------------------- outputs


def _outputs(out_dir: Path) -> list[str]:
    return [
        "--csv",
        str(out_dir / "r.csv"),
        "--json",
        str(out_dir / "r.json"),
        "--np-out",
        str(out_dir / "np.out"),
        "--report",
        str(out_dir / "r.html"),
        "--plots",
        str(out_dir / "plots"),
    ]


@pytest.mark.timeout(300)
def test_existing_outputs_are_never_overwritten_without_force(base, tmp_path, capsys):
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    code, _out, err = analyze(capsys, str(base), *_outputs(out_dir))
    assert code == 0, err
    written = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    assert len(written) >= 5 and not [p for p in out_dir.rglob("*") if ".tmp" in p.name]
    for single in ("--csv", "--json", "--np-out", "--report"):
        target = _outputs(out_dir)[_outputs(out_dir).index(single) + 1]
        Path(target).write_bytes(b"keep me")
        code, _out, err = analyze(capsys, str(base), single, target)
        assert code == 2 and "--force" in err, err
        assert Path(target).read_bytes() == b"keep me"
        code, _out, err = analyze(capsys, str(base), single, target, "--force")
        assert code == 0 and Path(target).read_bytes() != b"keep me", err
    figure = next((out_dir / "plots").glob("*.png"))
    figure.write_bytes(b"keep me")
    code, _out, err = analyze(capsys, str(base), "--plots", str(out_dir / "plots"))
    assert code == 2 and figure.read_bytes() == b"keep me", err


@pytest.mark.timeout(300)
def test_a_failed_write_leaves_no_partial_output(base, tmp_path, capsys, monkeypatch):
    import npmpi_analysis.outfiles as outfiles

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outfiles.os, "fsync", disk_full)
    target = tmp_path / "r.json"
    code, _out, err = analyze(capsys, str(base), "--json", str(target))
    assert code == 1 and "No space left" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary file


# --------------------------------------------------------------------------- map files (issue 28)

MAP_HOSTS = ["n0", "n1", "n2", "n3"]
MAP_REQUIRED = [
    "map/" + n
    for n in (
        "hosts",
        "ranks",
        "size_bytes",
        "pair",
        "round_first_row",
        "trial_s",
        "iterations",
        "bytes_moved",
        "window_start_unix_s",
        "window_end_unix_s",
    )
]


def write_map_base(path: Path, rounds: int = 9, status: str = "complete") -> Path:
    """A map file as `mpirun -np 5 python -m npmpi map --meter estimate` writes it (4 members, 3
    sizes, 3 rounds each, a power rank's channel sampled throughout), by the map writer itself."""
    from npmpi.map.schedule import circle_rounds, round_matrix
    from npmpi.runfile.mapwriter import MapWriter, PairResult

    matrix = round_matrix(circle_rounds(4), 4)
    spec = {
        "attrs": {
            "schedule": "rounds",
            "per_rank": False,
            "kernel": "python",
            "mode": "pingpong",
            "window": 1,
        },
        "hosts": MAP_HOSTS,
        "ranks": [0, 1, 2, 3],
        "sizes": [1, 65536, 4 << 20],
        "rounds_matrix": matrix,
        "n_rounds": 3,
    }
    layout = {"host": [*MAP_HOSTS, "n0"], "node_index": [0, 1, 2, 3, 0], "role": ["map"] * 4 + ["power"]}
    w = MapWriter(path, {"kernel": "python", "command_line": "python -m npmpi map"}, layout, 3, map_spec=spec)
    w.create_power(
        {"baseline_requested_s": 0.5, "sample_interval_requested_s": "natural"},
        [{"host": "n0", "node_index": 0, "power_rank": 4, "meter_specs": ["estimate"], "meters_skipped": ""}],
        [[{"kind": "estimate", "spec": "estimate", "label": "estimated", "sample_interval_s": 0.01}]],
    )
    w.set_group_attrs("power", baseline_start_unix_s=T0 - 0.6, baseline_end_unix_s=T0 - 0.1)
    w.set_group_attrs("power/node0", clock_offset_start_s=1e-5, clock_offset_start_measured_unix_s=T0 - 1)
    for k in range(rounds):
        s, r = divmod(k, 3)
        pairs = [(i, j) for i in range(4) for j in range(i + 1, 4) if matrix[i, j] == r]
        start = T0 + 0.5 * k
        trial = np.array([1e-3, 1.1e-3, 1.05e-3]) * (1 + s)
        w.store_round(s, r, (start, start + 0.4), [PairResult(i, j, 100, 10, trial) for i, j in pairs])
    times = np.arange(T0 - 0.6, T0 + 0.5 * rounds + 0.2, 0.01)
    nan = np.full(len(times), np.nan)
    samples = {
        "time_unix_s": times,
        "power_w": 60 + np.sin(times),
        "energy_j": nan,
        "volts": nan,
        "amps": nan,
    }
    w.append_samples(0, 0, samples, [(T0 + 0.01, "no reading for 5 sample intervals")])
    w.flush()
    w.finish(status, "" if status == "complete" else f"{status} on purpose")
    return path


def mutate_map(base: Path, dst: Path, rng, kind: str) -> Mutation:
    """Copy the map `base` to `dst` and damage it as `kind` says."""
    shutil.copy(base, dst)
    if kind in ("truncate", "bitflip", "overwrite"):
        return mutate(base, dst, rng, kind)
    pick = lambda items: items[int(rng.integers(len(items)))]  # noqa: E731
    if kind == "partial":  # a map stopped after `keep` rounds by the writer: the rest never written
        keep = int(rng.integers(1, 9))
        status = pick(["running", "interrupted", "failed"])
        dst.unlink()
        write_map_base(dst, rounds=keep, status=status)
        return Mutation(f"{status} after {keep} rounds", "partial")
    with h5py.File(dst, "r+") as f:
        g = f["map"]
        if kind == "missing":
            name = pick(MAP_REQUIRED)
            del f[name]
            return Mutation(f"{name} deleted", "error", (f"/{name} is missing",))
        if kind == "shape":
            name = pick(MAP_REQUIRED)
            _rewrite(f, name, np.zeros((2, 3, 5, 7)) if name != "map/trial_s" else np.zeros((3, 4, 4, 3)))
            return Mutation(f"{name} reshaped", "error", (f"/{name}",))
        if kind == "mistype":
            name = pick(MAP_REQUIRED)
            shape = f[name].shape
            _rewrite(f, name, np.zeros(shape, dtype=np.complex128))
            return Mutation(f"{name} mistyped", "error", (f"/{name}",))
        if kind == "values":
            name, index, value, frag = pick(
                [
                    ("map/trial_s", (0, 1, 0), -1.0, "non-positive"),  # a rows map: [S, P, T]
                    ("map/trial_s", (1, 3, 1), np.inf, "infinite"),
                    ("map/trial_s", (2, 1, 2), 1e300, "impossible"),
                    ("map/size_bytes", (1,), 0, "below 1 byte"),
                    ("map/size_bytes", (2,), 1, "a size twice"),
                    ("map/pair", (0, 1), 7, "a member that is not mapped"),
                    ("map/round_first_row", (1,), 100, "does not run from 0"),
                    ("map/iterations", (0, 1), 0, "below 1"),
                    ("map/bytes_moved", (1, 3), -5, "negative"),
                ]
            )
            data = f[name][()]
            data[index] = value
            f[name][...] = data
            return Mutation(f"{name}{list(index)} = {value}", "error", (frag,))
        if kind == "huge":
            name = pick(["map/trial_s", "map/iterations", "map/hosts"])
            ds = f[name]
            claimed = 100_000 if name == "map/hosts" else int(10 ** rng.uniform(4, 6))
            shape = (claimed, *ds.shape[1:]) if name != "map/trial_s" else (*ds.shape[:2], claimed)
            _rewrite(f, name, shape=shape, chunks=tuple(min(d, 64) for d in shape), dtype=ds.dtype)
            return Mutation(f"{name} claims {shape}", "error", (f"/{name}", "/map/"))
        if kind == "link":
            name = pick(MAP_REQUIRED)
            del f[name]
            f[name] = (
                h5py.SoftLink("/nowhere") if rng.random() < 0.5 else h5py.ExternalLink("/etc/passwd", "/x")
            )
            return Mutation(f"{name} made a link", "error", (f"/{name}",))
        if kind == "hostile-text":
            g["hosts"][int(rng.integers(4))] = "\x1b[2J\x07\r\u202eevil"
            g["hosts"].attrs[TEXT_CHECKSUM] = text_crc32(g["hosts"][()])  # forged consistently
            g.attrs["status_message"] = "\x1b]0;title\x07"
            return Mutation("escapes in the host names", "any")
        if kind == "attr":
            owner = pick(["/", "/map", "/power/node0", "/power/node0/channel0"])
            key = pick(list(f[owner].attrs))
            value = pick(WEIRD_ATTRS)
            f[owner].attrs[key] = value
            return Mutation(f"attribute {owner}@{key} = {value!r:.30}", "any")
    raise AssertionError(kind)


MAP_PLAN = {
    "truncate": 12,
    "bitflip": 12,
    "overwrite": 8,
    "missing": 9,
    "shape": 6,
    "mistype": 4,
    "values": 9,
    "huge": 5,
    "link": 4,
    "hostile-text": 2,
    "attr": 8,
    "partial": 6,
}


@pytest.mark.timeout(600)
def test_corrupted_map_files_in_process(tmp_path, capsys):
    base = write_map_base(tmp_path / "map-base.h5")
    code, out, err = analyze(capsys, str(base))
    assert code == 0 and err == "" and "6/6 at 4 MiB" in out, err
    rng = np.random.default_rng(MUTATION_SEED + 28)
    results: dict[str, int] = {}
    failures = []
    slowest = 0.0
    for kind, n in MAP_PLAN.items():
        for k in range(n):
            path = tmp_path / f"map-{kind}-{k}.h5"
            m = mutate_map(base, path, rng, kind)
            t0 = time.monotonic()
            try:
                code, out, err = analyze(capsys, str(path))
                check_outcome(m, path, code, out, err)
            except (AssertionError, CallTimeout) as exc:
                failures.append(f"{path.name} ({m.name}): {exc}")
                code = -1
            slowest = max(slowest, time.monotonic() - t0)
            results[f"{m.expect} exit {code}"] = results.get(f"{m.expect} exit {code}", 0) + 1
            path.unlink()
    with capsys.disabled():
        print(f"\n{sum(MAP_PLAN.values())} corrupted map files: {results}; slowest analysis {slowest:.2f} s")
    assert not failures, f"{len(failures)} map files:\n" + "\n\n".join(failures[:10])
