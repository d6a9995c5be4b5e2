"""The batch scripts of jobs/ under a real single-node Slurm (Debian's slurm-wlm), submitted with sbatch.

One cluster serves the module: the one-node job under mpirun (pip's Open MPI), the sweep of four
configurations, the CPU-frequency sweep, the two-nodes script under `srun --mpi=pmix` with Debian's
Open MPI, and a job whose time limit comes mid-sweep. The cluster is stopped by PID at the end,
whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import VENV, built_env
from support.slurm_cluster import REPO, SlurmCluster, SlurmUnavailable

from npmpi.runfile.reader import load_run

pytestmark = [pytest.mark.mpi, pytest.mark.slow]

JOBS = REPO / "jobs"
WHEEL_VENV = VENV  # the environment running the tests
DEBIAN_VENV = built_env(".venv-debian-mpi")
QUICK = "--quick -u 16K --baseline 0.5"
TRACE = "time_s,power_w\n0,180\n0.5,220\n1,180\n"
REPLAY = "replay:trace.csv,interval=0.1"
PYTHON = os.environ.get("PYTHON", "python3")  # the interpreter scripts/setup.sh builds venvs from


@pytest.fixture(scope="module")
def cluster():
    try:
        c = SlurmCluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"no local Slurm: {exc}")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "trace.csv").write_text(TRACE)
    return tmp_path


def job_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {
        "NPMPI_VENV": str(venv),
        "METERS": REPLAY,
        "NPMPI_ARGS": QUICK,
        "OMPI_MCA_btl": "^ofi",
        # the node claims more CPUs than it has cores: waiting ranks must yield them, as Open MPI
        # would do by itself had it known it was oversubscribed
        "OMPI_MCA_mpi_yield_when_idle": "1",
    }
    env.update(extra)
    return env


def submit(cluster, script: str, workdir: Path, options: list[str], env: dict, timeout: float):
    job_id = cluster.sbatch(JOBS / script, workdir, ["--time=3", *options], env)
    return cluster.wait(job_id, timeout)


def check_finished(job) -> None:
    assert job.state == "COMPLETED", f"job {job.job_id}: {job.state} {job.exit_code}\n{job.output}"
    codes = re.findall(r"launcher exit (\d+)", job.output)
    assert codes and set(codes) == {"0"}, job.output


def check_analysis(outdir: Path, name: str, runs: int) -> dict:
    for suffix in (".html", ".csv", ".json"):
        assert (outdir / f"{name}{suffix}").stat().st_size > 0
    assert any((outdir / f"{name}-plots").glob("*.png"))
    data = json.loads((outdir / f"{name}.json").read_text())
    assert len(data["runs"]) == runs
    return data


def check_replay_power(run) -> None:
    (node,) = run.power
    (ch,) = node.channels
    assert ch.attrs["kind"] == "replay" and ch.label == "simulated"
    assert len(ch.power_w) > 5
    assert np.all((ch.power_w >= 180 - 1e-9) & (ch.power_w <= 220 + 1e-9))


@pytest.mark.timeout(240)
def test_one_node_job_under_mpirun(cluster, workdir):
    job = submit(cluster, "one-node.sbatch", workdir, [], job_env(WHEEL_VENV, LAUNCHER="mpirun"), 150)
    check_finished(job)
    assert job.stdout_path == workdir / f"npmpi-one-node-{job.job_id}.out"
    name = f"npmpi-one-node-{job.job_id}"
    run = load_run(workdir / "runs" / f"{name}.h5")
    assert run.status == "complete"
    assert run.attrs["slurm_job_id"] == job.job_id
    # the Slurm context: mpirun inside the batch script runs in the batch step; this test cluster has no
    # energy accounting plugin, so Slurm's ConsumedEnergy is recorded as absent, with the reason
    assert run.attrs["slurm_step_id"] == "batch" and run.attrs["slurm_job_nodelist"]
    assert run.attrs["slurm_energy_step"] == f"{job.job_id}.batch"
    assert np.isnan(run.attrs["slurm_consumed_energy_j"]) and run.attrs["slurm_energy_source"] == ""
    assert run.attrs["slurm_energy_note"].startswith("absent: sstat: "), run.attrs["slurm_energy_note"]
    assert list(run.layout["role"]) == ["transmitter", "reflector", "power"]
    assert "--quick" in run.attrs["command_line"] and len(run.pingpong) > 10
    check_replay_power(run)
    assert "mpirun -np 3 --bind-to none" in job.output
    data = check_analysis(workdir / "runs", name, 1)
    assert data["runs"][0]["summary"]["status"] == "complete"
    # npmpi-analyze says what Slurm's count was (absent here) beside npmpi's
    assert any("Slurm's energy count of the step: absent: sstat: " in n for n in data["runs"][0]["notices"])


@pytest.mark.timeout(300)
def test_sweep_job_compares_kernels_and_transports(cluster, workdir):
    from npmpi import _build_info

    kernels = "python c" if _build_info.CKERNEL_BUILT else "python"
    job = submit(
        cluster,
        "sweep.sbatch",
        workdir,
        ["--nodes=1", "--ntasks-per-node=3"],
        job_env(WHEEL_VENV, KERNELS=kernels, NPMPI_ARGS="--quick -u 4K --baseline 0.3"),
        240,
    )
    check_finished(job)
    name = f"npmpi-sweep-{job.job_id}"
    latency = {}
    for kernel in kernels.split():
        for transport in ("default", "tcp"):
            run = load_run(workdir / "runs" / f"{name}-{kernel}-{transport}.h5")
            assert run.status == "complete", (kernel, transport, run.attrs.get("status_message"))
            assert run.attrs["kernel"] == kernel
            latency[kernel, transport] = float(np.min(run.pingpong.one_way_s[:8]))
    assert job.output.count("OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self") == len(kernels.split())
    for kernel in kernels.split():
        # TCP over loopback costs ten microseconds or more per message, shared memory about one
        assert latency[kernel, "tcp"] > 2 * latency[kernel, "default"], latency
    data = check_analysis(workdir / "runs", name, 2 * len(kernels.split()))
    labels = {r["summary"]["label"] for r in data["runs"]}
    assert len(labels) == 2 * len(kernels.split())


@pytest.mark.timeout(240)
def test_cpufreq_sweep_records_what_was_requested_and_what_was_measured(cluster, workdir):
    """Each run's step gets its --cpu-freq (SLURM_CPU_FREQ_REQ, read by the srun that starts
    mpirun's daemons, and by the ranks); this cluster's VM may not apply it: the file says what was
    requested, and what the cores ran at or why that is unknown, and the table says the same."""
    env = job_env(WHEEL_VENV, FREQS="low high", NPMPI_ARGS="--quick -u 1K --baseline 0.3")
    job = submit(cluster, "cpufreq_sweep.sbatch", workdir, ["--nodes=1", "--ntasks-per-node=3"], env, 200)
    check_finished(job)
    name = f"npmpi-cpufreq_sweep-{job.job_id}"
    for freq in ("low", "high"):
        run = load_run(workdir / "runs" / f"{name}-{freq}.h5")
        assert run.status == "complete"
        c = run.pingpong.conditions
        for r in c.ranks:
            info = c.rank_info(int(r))
            assert info["settings_before"]["slurm_cpu_freq_req"] == freq, info
            known = np.isfinite(c.values["cpu_freq_hz"][:, list(c.ranks).index(r)]).any()
            assert known or info["cpu_freq_reason"].startswith("unknown, because"), info
    check_analysis(workdir / "runs", name, 2)
    table = (workdir / "runs" / f"{name}-freq.csv").read_text().splitlines()
    assert table[0].startswith("run,cpu_freq_requested,cpu_freq_ghz_measured,min_energy_pj_bit")
    assert [line.split(",")[1] for line in table[1:]] == ["low", "high"]


def debian_venv() -> Path:
    """A venv whose mpi4py and npmpi use Debian's Open MPI: reused when it works, else built.

    Built by scripts/setup.sh with NPMPI_VENV=.venv-debian-mpi NPMPI_MPI=system NPMPI_EXTRAS=
    MPICC=/usr/bin/mpicc (the benchmark without test tools; apt-get first when Debian's Open MPI
    is missing). mpi4py is installed beforehand through a pip
    wheel cache kept for Debian's MPI alone, so only the first build on a machine compiles it
    (about a minute on 2 cores).
    """
    probe = (
        "import sys; from mpi4py import MPI; import npmpi; "
        "sys.exit(0 if 'Debian' in MPI.Get_library_version() and "
        f"npmpi.__file__.startswith({str(REPO)!r}) else 1)"
    )
    python = DEBIAN_VENV / "bin" / "python"

    def works() -> bool:
        if not (python.exists() and Path("/usr/bin/mpicc").exists()):
            return False
        return subprocess.run([str(python), "-c", probe], capture_output=True, timeout=60).returncode == 0

    if works():
        return DEBIAN_VENV
    # CFLAGS as scripts/setup.sh gives it for the mpi4py build (no debug information: 5x faster)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", MPICC="/usr/bin/mpicc")
    env["CFLAGS"] = "-g0 " + env.get("CFLAGS", "")
    env.pop("PYTHONPATH", None)

    def run(cmd: list[str], timeout: float) -> None:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"

    if not Path("/usr/bin/mpicc").exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip("Debian's Open MPI (openmpi-bin, libopenmpi-dev) is missing and cannot be installed")
        run(["apt-get", "update", "-qq"], 600)
        packages = ["openmpi-bin", "libopenmpi-dev"]
        has_headers = "import os, sysconfig as s; assert os.path.isfile(s.get_path('include') + '/Python.h')"
        if subprocess.run([PYTHON, "-c", has_headers], capture_output=True, timeout=60).returncode != 0:
            packages.append("python3-dev")  # mpi4py and the C kernel are compiled
        run(["apt-get", "install", "-y", "-qq", *packages], 900)
    if not python.exists():
        run([PYTHON, "-m", "venv", str(DEBIAN_VENV)], 300)
    cache = Path.home() / ".cache" / "npmpi-debian-openmpi-wheels"
    pip = [str(python), "-m", "pip", "install", "-q", "--cache-dir", str(cache)]
    run([*pip, "--no-binary", "mpi4py", "mpi4py>=4.0"], 1800)
    env.update(NPMPI_VENV=os.path.relpath(DEBIAN_VENV, REPO), NPMPI_MPI="system", NPMPI_EXTRAS="")  # in REPO
    run(["bash", str(REPO / "scripts" / "setup.sh")], 1800)
    assert works(), f"{DEBIAN_VENV.name} was built but does not use Debian's Open MPI"
    return DEBIAN_VENV


@pytest.mark.timeout(3600)
def test_two_nodes_script_under_srun_pmix_with_debian_open_mpi(cluster, workdir):
    venv = debian_venv()
    host = socket.gethostname().split(".")[0]
    env = job_env(venv, LAUNCHER="srun", METERS="estimate", NODE_METERS=f"elsewhere=rapl {host}={REPLAY}")
    # one node here: the script's four tasks all land on it (two per node on a real cluster)
    job = submit(cluster, "two-nodes.sbatch", workdir, ["--nodes=1", "--ntasks-per-node=4"], env, 150)
    check_finished(job)
    assert "srun --mpi=pmix --kill-on-bad-exit=1" in job.output
    name = f"npmpi-two-nodes-{job.job_id}"
    run = load_run(workdir / "runs" / f"{name}.h5")
    assert run.status == "complete"
    assert "Debian" in run.attrs["mpi_library_version"]
    assert run.attrs["world_size"] == 4 and run.attrs["slurm_job_id"] == job.job_id
    assert list(run.layout["role"]) == ["transmitter", "reflector", "idle", "power"]
    # NODE_METERS named this host: its power rank read the replay trace, not the estimate
    assert list(run.power[0].attrs["meter_specs"]) == [REPLAY]
    check_replay_power(run)
    check_analysis(workdir / "runs", name, 1)


@pytest.mark.timeout(240)
def test_time_limit_mid_sweep_keeps_completed_sizes(cluster, workdir):
    # A one-minute limit with the warning signal asked for 20 s before it: slurmctld checks every
    # 30 s and sends it once fewer than 20 + 30 s are left, so SIGTERM reaches the batch script 10 to
    # 40 s in; the sweep would need minutes.
    env = job_env(WHEEL_VENV, NPMPI_ARGS="--baseline 0 --target-time 0.1")
    job_id = cluster.sbatch(JOBS / "one-node.sbatch", workdir, ["--time=1", "--signal=B:TERM@20"], env)
    job = cluster.wait(job_id, 150)
    assert job.state != "TIMEOUT", job.output  # the script ended before the limit
    assert "SIGTERM: the time limit is near" in job.output
    name = f"npmpi-one-node-{job.job_id}"
    run = load_run(workdir / "runs" / f"{name}.h5")
    assert run.status == "interrupted", run.attrs.get("status_message")
    assert "SIGTERM" in run.attrs["status_message"]
    assert run.attrs["sizes_completed"] == len(run.pingpong) >= 1
    assert len(run.pingpong) < 124
    assert run.attrs["elapsed_s"] < 60
    assert len(run.power[0].channels[0].time_unix_s) > 0
    data = check_analysis(workdir / "runs", name, 1)
    assert data["runs"][0]["summary"]["status"] == "interrupted"
