"""Real `mpirun` jobs of `python -m npmpi`: both kernels, the file's contents, bad input, faults."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import numpy as np
import pytest
from support.launcher import local_mpi_env, npmpi_command

from npmpi.core.schedule import netpipe_repeats, netpipe_schedule
from npmpi.runfile.reader import load_run

pytestmark = pytest.mark.mpi

SHORT = ["-u", "64K", "--trials", "3", "--target-time", "0.002"]


def assert_one_clear_error(proc, fragment):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("npmpi: error:")]
    assert len(lines) == 1, proc.stderr
    assert fragment in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("kernel", ["python", "c"])
def test_short_sweep_writes_a_complete_file(npmpi_run, tmp_path, kernel):
    proc = npmpi_run([*SHORT, "--kernel", kernel, "-o", "run.h5"])
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "run.h5")
    assert run.status == "complete" and run.notices == []
    expected = [p.size_bytes for p in netpipe_schedule(1, 64 * 1024, 3)]
    pp = run.pingpong
    assert pp.size_bytes.tolist() == expected
    assert np.all(pp.iterations >= 3)
    assert pp.trial_s.shape == (len(expected), 3) and np.all(pp.trial_s > 0)
    assert np.all(pp.trial_end_unix_s >= pp.trial_start_unix_s)
    assert np.all(np.diff(pp.trial_start_unix_s.ravel()) > 0)  # trials in order on the wall clock
    assert np.all(pp.data_verified)
    a = run.attrs
    assert a["kernel"] == kernel and a["world_size"] == 2 and a["timing_comparable"]
    assert "Open MPI" in a["mpi_library_version"] and a["clock_resolution_s"] > 0
    assert a["clock_read_cost_s"] > 0 and a["sizes_completed"] == len(expected)
    for key in (
        "npmpi_version",
        "mpi4py_version",
        "numpy_version",
        "h5py_version",
        "python_version",
        "created_utc",
        "command_line",
        "finished_utc",
    ):
        assert a[key], key
    assert list(run.layout["role"]) == ["transmitter", "reflector"]
    # NetPIPE's defaults are what the file says the run used
    options = json.loads(a["options_json"])
    assert a["buffers"] == options["buffers"] == "netpipe"
    assert options["max_one_way_s"] == 1.0 and "max_round_trip_s" not in options
    # every size's iterations by NetPIPE's nrepeat rule from the previous size's best one-way time
    for k in range(1, len(expected)):
        t_prev = pp.trial_s[k - 1].min() / (2 * pp.iterations[k - 1])
        want = netpipe_repeats(
            0.002, expected[k - 1], netpipe_schedule(1, 64 * 1024, 3)[k].increment_bytes, t_prev, 3, 10**9
        )
        assert pp.iterations[k] == want, k
    # console: header, one line per size, a summary
    out = proc.stdout
    assert f"{kernel} kernel" in out and "peak bandwidth" in out and "latency" in out
    assert sum(" bytes " in ln and " times --> " in ln for ln in out.splitlines()) == len(expected)


def test_repeats_fix_iterations_and_default_name_is_unique(npmpi_run, tmp_path):
    for _ in range(2):
        proc = npmpi_run(["-u", "1K", "-p", "0", "--repeats", "17", "--trials", "2", "-q"])
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == ""
    files = sorted((tmp_path / "runs").glob("npmpi-*.h5"))
    assert len(files) == 2 and not list(tmp_path.glob("*.h5"))
    assert (tmp_path / "runs" / ".gitignore").read_text().splitlines()[-1] == "*"  # runs/ ignored by git
    assert set(load_run(files[0]).pingpong.iterations.tolist()) == {17}


def test_integrity_mode_checks_every_message_and_is_marked(npmpi_run, tmp_path):
    proc = npmpi_run(["-u", "4K", "--repeats", "5", "--trials", "2", "--integrity", "-o", "i.h5"])
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "i.h5")
    assert run.status == "complete" and not run.attrs["timing_comparable"]


def test_three_ranks_leave_one_idle(npmpi_run, tmp_path):
    proc = npmpi_run([*SHORT, "-u", "1K", "-o", "r.h5"], np=3)
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert list(run.layout["role"]) == ["transmitter", "reflector", "idle"]


def test_one_rank_is_refused(npmpi_run, tmp_path):
    proc = npmpi_run([], np=1, timeout=60)
    assert_one_clear_error(proc, "a ping-pong needs 2 ranks")
    assert "mpirun -np 2" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["-l", "2K", "-u", "1K"], "below --lower"),
        (["--kernel", "fortran"], "unknown kernel"),
        (["-u", "3G"], "largest message this MPI can carry"),
        (["--trials", "0"], "--trials"),
        (["-o", "missing-dir/run.h5"], "does not exist"),
    ],
)
def test_bad_input_exits_2_on_every_rank_and_leaves_no_file(npmpi_run, tmp_path, args, fragment):
    t0 = time.monotonic()
    proc = npmpi_run(args, timeout=60)
    assert_one_clear_error(proc, fragment)
    assert time.monotonic() - t0 < 30
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(npmpi_run, tmp_path):
    (tmp_path / "run.h5").write_bytes(b"keep me")
    proc = npmpi_run([*SHORT, "-o", "run.h5"])
    assert_one_clear_error(proc, "--force")
    assert (tmp_path / "run.h5").read_bytes() == b"keep me"
    proc = npmpi_run([*SHORT, "-u", "64", "-o", "run.h5", "--force"])
    assert proc.returncode == 0 and load_run(tmp_path / "run.h5").status == "complete"


def test_help_prints_once(npmpi_run):
    proc = npmpi_run(["--help"])
    assert proc.returncode == 0
    assert proc.stdout.count("usage: python -m npmpi") == 1


def test_data_mismatch_stops_with_the_size_named(npmpi_run, tmp_path):
    proc = npmpi_run([*SHORT, "-o", "r.h5"], env={"NPMPI_FAULT_CORRUPT_SIZE": "128"})
    assert proc.returncode == 1
    assert "data check failed at message size 128 B" in proc.stderr
    assert "Traceback" not in proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "failed" and "128 B" in run.attrs["status_message"]
    assert run.pingpong.size_bytes[-1] < 128 and len(run.pingpong) > 0


def test_exception_on_the_reflector_ends_the_job(npmpi_run, tmp_path):
    t0 = time.monotonic()
    proc = npmpi_run([*SHORT, "-o", "r.h5"], env={"NPMPI_FAULT_RAISE_SIZE": "96"}, timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30
    assert "rank 1" in proc.stderr and "fault injected at 96 B" in proc.stderr
    assert "Traceback" not in proc.stderr
    run = load_run(tmp_path / "r.h5")  # rank 0 was killed by the abort: the file says so
    assert run.status in ("running", "failed") and run.notices
    assert len(run.pingpong) > 0 and run.pingpong.size_bytes[-1] < 96


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_marks_the_file_interrupted(tmp_path, sig):
    cmd = npmpi_command(2, ["-o", "r.h5"])
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=local_mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    # wait for a few sizes to complete (NetPIPE's rule gives the first sizes trials of about
    # 2 x RUNTM: some 5 s on an idle 2-core machine, several times that under load)
    deadline = time.monotonic() + 120
    seen = False
    while not seen and time.monotonic() < deadline:
        seen = proc.stdout.readline().startswith("  5:")
    proc.send_signal(sig)
    assert seen, "six sizes did not complete within 120 s"
    t0 = time.monotonic()
    try:
        _out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the job did not end within 30 s of the signal")
    assert time.monotonic() - t0 < 10
    assert proc.returncode != 0
    assert "Traceback" not in err
    run = load_run(tmp_path / "r.h5")
    assert run.status == "interrupted"
    assert len(run.pingpong) >= 6 and np.all(run.pingpong.trial_s > 0)
    # every completed size kept its ranks' CPU time too (format 1.7), flushed in the same row
    assert run.pingpong.cpu.cpu_wall_s.shape == (len(run.pingpong), 2)
    assert np.all(np.isfinite(run.pingpong.cpu.cpu_wall_s))


def test_sweep_stops_early_when_the_one_way_time_is_too_long(npmpi_run, tmp_path):
    proc = npmpi_run([*SHORT, "--max-one-way", "0.000000001", "-o", "r.h5"])
    assert proc.returncode == 0, proc.stderr
    run = load_run(tmp_path / "r.h5")
    assert run.status == "complete" and len(run.pingpong) == 1
    assert "--max-one-way 1e-09" in run.attrs["stopped_early"]
    assert json.loads(run.attrs["options_json"])["max_one_way_s"] == 1e-9
    assert "stopped early" in proc.stdout
