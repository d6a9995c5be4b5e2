"""The batch scripts of jobs/ without Slurm: their #SBATCH lines, and their launch lines.

The scripts are read as text (directives, documented header, settings at the top, one shared
machinery block) and run with bash against fakes: a launcher that records its command line and
starts each rank under a fake host name, a `python` that records what npmpi would have received,
and an `npmpi-analyze` that records its arguments. The fake launcher signals every rank's process
group, as mpirun and srun do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
JOBS = REPO / "jobs"
SCRIPTS = ("one-node", "two-nodes", "sweep", "map", "protocol_ladder", "collectives", "cpufreq_sweep")

EXPECTED_DIRECTIVES = {
    "one-node": {
        "job-name": "npmpi-one-node",
        "nodes": "1",
        "ntasks": "3",
        "time": "00:15:00",
        "signal": "B:TERM@60",
        "output": "%x-%j.out",
    },
    "two-nodes": {
        "job-name": "npmpi-two-nodes",
        "nodes": "2",
        "ntasks-per-node": "2",
        "time": "00:15:00",
        "signal": "B:TERM@60",
        "output": "%x-%j.out",
    },
    "map": {
        "job-name": "npmpi-map",
        "nodes": "4",
        "ntasks-per-node": "2",
        "time": "00:30:00",
        "signal": "B:TERM@60",
        "output": "%x-%j.out",
    },
    "protocol_ladder": {
        "job-name": "npmpi-protocol-ladder",
        "nodes": "2",
        "ntasks-per-node": "2",
        "time": "00:30:00",
        "signal": "B:TERM@90",
        "output": "%x-%j.out",
    },
    "collectives": {
        "job-name": "npmpi-collectives",
        "nodes": "2",
        "ntasks-per-node": "5",
        "time": "00:30:00",
        "signal": "B:TERM@90",
        "output": "%x-%j.out",
    },
    "cpufreq_sweep": {
        "job-name": "npmpi-cpufreq-sweep",
        "nodes": "2",
        "ntasks-per-node": "2",
        "time": "00:30:00",
        "signal": "B:TERM@90",
        "output": "%x-%j.out",
    },
    "sweep": {
        "job-name": "npmpi-sweep",
        "nodes": "2",
        "ntasks-per-node": "2",
        "time": "00:30:00",
        "signal": "B:TERM@90",
        "output": "%x-%j.out",
    },
}


def script_text(name: str) -> str:
    return (JOBS / f"{name}.sbatch").read_text()


def directives(text: str) -> dict[str, str]:
    """#SBATCH options as sbatch reads them: only before the first command line."""
    found = {}
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        m = re.match(r"#SBATCH\s+--([\w-]+)(?:=(\S+))?\s*$", line)
        if m:
            found[m.group(1)] = m.group(2) or ""
    return found


@pytest.mark.parametrize("name", SCRIPTS)
def test_sbatch_directives(name):
    text = script_text(name)
    assert text.startswith("#!/bin/bash\n")
    assert directives(text) == EXPECTED_DIRECTIVES[name]
    # sbatch ignores #SBATCH after the first command: none may hide there
    body = text.split("\n# ================================ settings", 1)[1]
    assert "#SBATCH" not in body
    assert os.access(JOBS / f"{name}.sbatch", os.R_OK)


@pytest.mark.parametrize("name", SCRIPTS)
def test_header_says_what_why_and_how(name):
    header = script_text(name).split("# ================================ settings", 1)[0]
    for section in ("WHAT IT MEASURES", "WHAT TO CHANGE", "HOW TO READ THE RESULT", "TIME LIMIT"):
        assert f"# {section}" in header
    for word in (
        "LAUNCHER",
        "METERS",
        "NODE_METERS",
        "NPMPI_ARGS",
        "SIGTERM",
        "interrupted",
        "npmpi-analyze",
    ):
        assert word in header


@pytest.mark.parametrize("name", SCRIPTS)
def test_settings_come_first(name):
    text = script_text(name)
    settings = text.split("# ================================ settings", 1)[1].split("# =====", 1)[0]
    names = re.findall(r"^([A-Z_]+)=", settings, flags=re.M)
    for setting in ("LAUNCHER", "METERS", "NODE_METERS", "NPMPI_ARGS", "NPMPI_VENV", "OUTDIR"):
        assert setting in names
    assert "LAUNCHER=${LAUNCHER:-mpirun}" in settings
    assert "SRUN_OPTS=${SRUN_OPTS---mpi=pmix --kill-on-bad-exit=1}" in settings
    assert "MPIRUN_OPTS=${MPIRUN_OPTS---bind-to none}" in settings


def machinery(text: str) -> str:
    start = text.index("# ================ the machinery")
    return text[start : text.index("# ================ end of the machinery", start)]


def test_the_machinery_is_the_same_in_every_script():
    blocks = {name: machinery(script_text(name)) for name in SCRIPTS}
    assert blocks["two-nodes"] == blocks["one-node"]
    assert blocks["sweep"] == blocks["one-node"]
    assert blocks["map"] == blocks["one-node"]
    assert blocks["protocol_ladder"] == blocks["one-node"]
    assert blocks["collectives"] == blocks["one-node"]
    assert blocks["cpufreq_sweep"] == blocks["one-node"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_parse(name):
    assert subprocess.run(["bash", "-n", str(JOBS / f"{name}.sbatch")], timeout=30).returncode == 0


# ---- running the scripts against fakes

FAKE_LAUNCHER = r"""#!PYTHON
import json, os, signal, subprocess, sys, time
log = os.environ["FAKE_LOG"]
argv = sys.argv
with open(log, "a") as f:
    kept = ("OMPI_", "NPMPI_NODE", "NPMPI_METERS", "SLURM_CPU_FREQ")
    env = {k: v for k, v in os.environ.items() if k.startswith(kept)}
    f.write(json.dumps({"what": "launch", "argv": argv, "env": env}) + "\n")
i = argv.index("sh")
ranks = []
for host in os.environ.get("FAKE_HOSTS", "node1").split():
    hostdir = os.path.join(os.environ["FAKE_DIR"], "hosts", host)
    os.makedirs(hostdir, exist_ok=True)
    with open(os.path.join(hostdir, "hostname"), "w") as f:
        f.write(f"#!/bin/sh\necho {host}\n")
    os.chmod(os.path.join(hostdir, "hostname"), 0o755)
    env = dict(os.environ, PATH=hostdir + ":" + os.environ["PATH"], FAKE_HOST=host)
    ranks.append(subprocess.Popen(argv[i:], env=env, start_new_session=True))

def forward(signum, frame):  # as mpirun and srun do: to each task's process group
    with open(log, "a") as f:
        f.write(json.dumps({"what": "launcher-signal", "signal": signum}) + "\n")
    for p in ranks:
        try:
            os.killpg(p.pid, signum)
        except ProcessLookupError:
            pass

signal.signal(signal.SIGUSR1, forward)
signal.signal(signal.SIGTERM, forward)
codes = [p.wait() for p in ranks]
sys.exit(max(codes, key=abs))
"""

FAKE_PYTHON = r"""#!PYTHON
import json, os, signal, sys, time
log = os.environ["FAKE_LOG"]
host = os.environ.get("FAKE_HOST", "")
terms = []
signal.signal(signal.SIGTERM, lambda s, f: terms.append(time.time()))
record = {"what": "rank", "host": host, "argv": sys.argv[1:], "meters": os.environ.get("NPMPI_METERS"),
          "usr1_ignored": signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN,
          "bmc_password": os.environ.get("NPMPI_REDFISH_PASSWORD")}
out = sys.argv[sys.argv.index("-o") + 1]
first = host == os.environ.get("FAKE_HOSTS", "node1").split()[0]
if first:
    with open(out, "w") as f:
        f.write("run file")
open(os.path.join(os.environ["FAKE_DIR"], "started-" + host), "w").close()
if os.environ.get("FAKE_RUN_S"):
    end = time.time() + float(os.environ["FAKE_RUN_S"])
    while time.time() < end and not terms:
        time.sleep(0.01)
    time.sleep(0.5)  # a second SIGTERM would arrive now
record["terms"] = len(terms)
with open(log, "a") as f:
    f.write(json.dumps(record) + "\n")
sys.exit(143 if terms else 0)
"""

FAKE_ANALYZE = r"""#!PYTHON
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({"what": "analyze", "argv": sys.argv[1:]}) + "\n")
report = sys.argv[sys.argv.index("--report") + 1]
open(report, "w").write("<html></html>")
"""


@pytest.fixture
def fakes(tmp_path):
    """A fake venv (python, npmpi-analyze, mpirun) and a fake srun on PATH."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for path, text in (
        (venv / "bin" / "python", FAKE_PYTHON),
        (venv / "bin" / "npmpi-analyze", FAKE_ANALYZE),
        (venv / "bin" / "mpirun", FAKE_LAUNCHER),
        (bindir / "srun", FAKE_LAUNCHER),
    ):
        path.write_text(text.replace("#!PYTHON", f"#!{sys.executable}", 1))
        path.chmod(0o755)
    return tmp_path


def job_env(fakes: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "NPMPI_"))}
    env.update(
        PATH=f"{fakes / 'bin'}:{env['PATH']}",
        FAKE_LOG=str(fakes / "log.jsonl"),
        FAKE_DIR=str(fakes),
        NPMPI_VENV=str(fakes / "venv"),
        SLURM_SUBMIT_DIR=str(fakes),
        SLURM_JOB_ID="4242",
        SLURM_NTASKS="3",
        METERS="rapl",
    )
    env.update(extra)
    return env


def records(fakes: Path, what: str) -> list[dict]:
    path = fakes / "log.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["what"] == what]


def run_script(name: str, env: dict, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(JOBS / f"{name}.sbatch")],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def rank_shell(text: str) -> str:
    return re.search(r"^RANK_SH='(.*?)'$", text, flags=re.M | re.S).group(1)


def test_one_node_launch_line_under_mpirun(fakes):
    env = job_env(fakes, NPMPI_ARGS="--quick -u 1M", METERS="rapl;estimate")
    proc = run_script("one-node", env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    out = f"{fakes}/runs/npmpi-one-node-4242.h5"
    py = str(fakes / "venv" / "bin" / "python")
    assert launch["argv"] == [
        str(fakes / "venv" / "bin" / "mpirun"),
        "-np",
        "3",
        "--bind-to",
        "none",
        "-x",
        "NPMPI_NODE_METERS",
        "sh",
        "-c",
        rank_shell(script_text("one-node")),
        "npmpi-rank",
        py,
        "-u",
        "-m",
        "npmpi",
        "--meter",
        "rapl",
        "--meter",
        "estimate",
        "--quick",
        "-u",
        "1M",
        "-o",
        out,
    ]
    (rank,) = records(fakes, "rank")
    assert rank["argv"][:3] == ["-u", "-m", "npmpi"] and rank["meters"] is None
    (analyze,) = records(fakes, "analyze")
    stem = f"{fakes}/runs/npmpi-one-node-4242"
    assert analyze["argv"] == [
        out,
        "--plots",
        f"{stem}-plots",
        "--report",
        f"{stem}.html",
        "--csv",
        f"{stem}.csv",
        "--json",
        f"{stem}.json",
    ]
    assert f"run file {out} (launcher exit 0)" in proc.stderr


def test_two_nodes_launch_line_under_srun_with_per_node_meters(fakes):
    env = job_env(
        fakes,
        LAUNCHER="srun",
        SLURM_NTASKS="4",
        FAKE_HOSTS="node017 node018 node019",
        NODE_METERS="node017=wattsup:/dev/ttyUSB0 node018=rapl;nvml",
    )
    proc = run_script("two-nodes", env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    shell = rank_shell(script_text("two-nodes"))
    assert Path(launch["argv"][0]).name == "srun"
    assert launch["argv"][1:6] == ["--mpi=pmix", "--kill-on-bad-exit=1", "sh", "-c", shell]
    assert launch["argv"][-4:] == ["--meter", "rapl", "-o", f"{fakes}/runs/npmpi-two-nodes-4242.h5"]
    meters = {r["host"]: r["meters"] for r in records(fakes, "rank")}
    # a listed host reads its own specs from NPMPI_METERS; an unlisted one keeps --meter
    assert meters == {"node017": "wattsup:/dev/ttyUSB0", "node018": "rapl;nvml", "node019": None}


@pytest.mark.parametrize("script", ["one-node", "two-nodes", "map"])
def test_meters_default_to_auto(fakes, script):
    env = job_env(fakes, SLURM_NTASKS="4")
    del env["METERS"]  # not set at submission: the script's default
    proc = run_script(script, env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    at = launch["argv"].index("--meter")
    assert launch["argv"][at : at + 2] == ["--meter", "auto"] and launch["argv"].count("--meter") == 1
    assert "METERS=${METERS-auto}" in script_text(script)


def test_meter_credentials_reach_the_ranks_by_name_only(fakes):
    secret = 'bmc-Pa$$-w0rd "q'  # $, a blank and a quote: taken as written inside single quotes
    cred = fakes / "bmc.env"
    quoted = "'" + secret + "'"
    cred.write_text(
        f"# BMC monitoring account\nNPMPI_REDFISH_USER=monitor\nexport NPMPI_REDFISH_PASSWORD={quoted}\n"
    )
    cred.chmod(0o600)
    env = job_env(fakes, METERS="redfish:bmc1,verify=no", METER_CREDENTIALS=str(cred))
    proc = run_script("one-node", env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    i = launch["argv"].index("NPMPI_NODE_METERS")
    assert launch["argv"][i + 1 : i + 5] == ["-x", "NPMPI_REDFISH_USER", "-x", "NPMPI_REDFISH_PASSWORD"]
    assert secret not in " ".join(launch["argv"]) + proc.stdout + proc.stderr  # names only, never the value
    assert [r["bmc_password"] for r in records(fakes, "rank")] == [secret]
    cred.chmod(0o644)
    proc = run_script("one-node", env, fakes)
    assert proc.returncode == 2 and f"others may read it: chmod 600 {cred}" in proc.stderr
    assert secret not in proc.stdout + proc.stderr


def test_map_runs_the_map_subcommand_with_a_power_rank_per_node(fakes):
    env = job_env(fakes, SLURM_NTASKS="8", NPMPI_ARGS="--quick --sizes 1,1M", FAKE_HOSTS="n1 n2 n3 n4")
    proc = run_script("map", env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    out = f"{fakes}/runs/npmpi-map-4242.h5"
    assert launch["argv"][1:3] == ["-np", "8"]
    at = launch["argv"].index("npmpi")
    assert launch["argv"][at - 1 :] == [
        "-m",
        "npmpi",
        "map",
        "--meter",
        "rapl",
        "--quick",
        "--sizes",
        "1,1M",
        "-o",
        out,
    ]
    assert len(records(fakes, "rank")) == 4
    (analyze,) = records(fakes, "analyze")
    assert analyze["argv"][:3] == [out, "--plots", f"{fakes}/runs/npmpi-map-4242-plots"]
    assert f"map file {out} (launcher exit 0)" in proc.stderr


def test_outside_slurm_mpirun_gets_the_jobs_shape(fakes):
    env = job_env(fakes, METERS="")
    del env["SLURM_JOB_ID"], env["SLURM_NTASKS"], env["SLURM_SUBMIT_DIR"]
    proc = run_script("two-nodes", env, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    assert launch["argv"][1:3] == ["-np", "4"]
    assert "--meter" not in launch["argv"]  # METERS empty: no power ranks
    assert re.search(r"/runs/npmpi-two-nodes-local-\d{8}-\d{6}\.h5$", launch["argv"][-1])


def test_sweep_runs_every_configuration_then_one_analysis(fakes):
    proc = run_script("sweep", job_env(fakes, NPMPI_ARGS="--quick"), fakes)
    assert proc.returncode == 0, proc.stderr
    launches = records(fakes, "launch")
    configs = []
    for launch in launches:
        argv = launch["argv"]
        kernel = argv[argv.index("--kernel") + 1]
        tcp = launch["env"].get("OMPI_MCA_btl") == "tcp,self" and launch["env"].get("OMPI_MCA_pml") == "ob1"
        configs.append((kernel, "tcp" if tcp else "default"))
        assert argv[-1] == f"{fakes}/runs/npmpi-sweep-4242-{configs[-1][0]}-{configs[-1][1]}.h5"
        assert "--quick" in argv
    assert configs == [("python", "default"), ("python", "tcp"), ("c", "default"), ("c", "tcp")]
    assert "OMPI_MCA_btl" not in launches[0]["env"]
    (analyze,) = records(fakes, "analyze")
    files = analyze["argv"][: analyze["argv"].index("--plots")]
    assert files == [launch["argv"][-1] for launch in launches]
    assert analyze["argv"][analyze["argv"].index("--report") + 1] == f"{fakes}/runs/npmpi-sweep-4242.html"


def test_cpufreq_sweep_runs_every_frequency_then_one_analysis(fakes):
    proc = run_script("cpufreq_sweep", job_env(fakes, FREQS="low 2000000 performance"), fakes)
    assert proc.returncode == 0, proc.stderr
    launches = records(fakes, "launch")
    assert [launch["env"]["SLURM_CPU_FREQ_REQ"] for launch in launches] == ["low", "2000000", "performance"]
    outs = [launch["argv"][-1] for launch in launches]
    assert outs == [
        f"{fakes}/runs/npmpi-cpufreq_sweep-4242-{f}.h5" for f in ("low", "2000000", "performance")
    ]
    (analyze,) = records(fakes, "analyze")
    assert analyze["argv"][: analyze["argv"].index("--plots")] == outs
    bad = run_script("cpufreq_sweep", job_env(fakes, FREQS="low;rm"), fakes)
    assert bad.returncode == 2 and "FREQS: low;rm is not a --cpu-freq value" in bad.stderr


def test_protocol_ladder_runs_every_protocol_then_the_side_by_side_analysis(fakes):
    proc = run_script("protocol_ladder", job_env(fakes, NPMPI_ARGS="--quick", SLURM_NTASKS="4"), fakes)
    assert proc.returncode == 0, proc.stderr
    launches = records(fakes, "launch")
    stem = f"{fakes}/runs/npmpi-protocol-ladder-4242"
    protocols = []
    for launch in launches:
        argv = launch["argv"]
        # mpi is npmpi's default: no --protocol, so the first rung runs on any npmpi
        protocols.append(argv[argv.index("--protocol") + 1] if "--protocol" in argv else "mpi")
        assert argv[argv.index("--kernel") + 1] == "c" and "--quick" in argv
        assert argv[-2:] == ["-o", f"{stem}-{protocols[-1]}.h5"]
    assert protocols == ["mpi", "tcp", "rma", "memcpy"]
    analyses = records(fakes, "analyze")
    files = [f"{stem}-{p}.h5" for p in protocols]
    assert analyses[0]["argv"][:5] == [*files, "--plots"]
    # then the per-size table as CSV (this fake npmpi-analyze wants --report: it fails, said in a line)
    assert analyses[1]["argv"] == [*files, "-q", "--compare-csv", f"{stem}-compare.csv"]
    assert f"no {stem}-compare.csv (npmpi-analyze said why above)" in proc.stderr
    bad = run_script("protocol_ladder", job_env(fakes, PROTOCOLS="mpi tcp;rm"), fakes)
    assert bad.returncode == 2 and "PROTOCOLS: 'tcp;rm' is not a protocol name" in bad.stderr


def test_collectives_run_every_op_checked_then_one_analysis(fakes):
    env = job_env(fakes, NPMPI_ARGS="--quick", SLURM_NTASKS="10", SIZES="8,1M", FAKE_HOSTS="n1 n2")
    proc = run_script("collectives", env, fakes)
    assert proc.returncode == 0, proc.stderr
    launches = records(fakes, "launch")
    stem = f"{fakes}/runs/npmpi-collectives-4242"
    ops = []
    for launch in launches:
        argv = launch["argv"]
        assert argv[1:3] == ["-np", "10"]
        at = argv.index("npmpi")
        ops.append(argv[argv.index("--op") + 1])
        tail = ["--op", ops[-1], "--dtype", "char", "--kernel", "c", "--check"]
        tail += [] if ops[-1] == "barrier" else ["--sizes", "8,1M"]  # a barrier moves no data
        assert argv[at + 1 :] == ["coll", "--meter", "rapl", "--quick", *tail, "-o", f"{stem}-{ops[-1]}.h5"]
    assert ops == ["allreduce", "allgather", "alltoall", "bcast", "reduce", "reduce_scatter", "barrier"]
    (analyze,) = records(fakes, "analyze")
    assert analyze["argv"][: len(ops) + 1] == [*(f"{stem}-{op}.h5" for op in ops), "--plots"]
    bad = run_script("collectives", job_env(fakes, OPS="allreduce gather"), fakes)
    assert bad.returncode == 2 and "OPS: 'gather' is not a collective" in bad.stderr
    assert len(records(fakes, "launch")) == len(ops)  # nothing more started


def test_collectives_at_several_rank_counts_and_tasks_per_node(fakes):
    env = job_env(fakes, NPMPI_ARGS="--quick", SLURM_NTASKS="10", OPS="allreduce", RANKS="2,4", PER_NODE="4")
    proc = run_script("collectives", env | {"FAKE_HOSTS": "n1 n2"}, fakes)
    assert proc.returncode == 0, proc.stderr
    (launch,) = records(fakes, "launch")
    argv = launch["argv"]
    assert argv[argv.index("--check") + 1 : argv.index("-o")] == ["--ranks", "2,4", "--per-node", "4"]
    bad = run_script("collectives", job_env(fakes, RANKS="2;rm"), fakes)
    assert bad.returncode == 2 and "RANKS: '2;rm' is not a list of rank counts" in bad.stderr


def test_unknown_launcher_is_refused(fakes):
    proc = run_script("one-node", job_env(fakes, LAUNCHER="aprun"), fakes)
    assert proc.returncode == 2
    assert "LAUNCHER=aprun: use mpirun or srun" in proc.stderr
    assert records(fakes, "launch") == []


def start_script(name: str, env: dict, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", str(JOBS / f"{name}.sbatch")],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )


def wait_for_ranks(fakes: Path, hosts: list[str], proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not all((fakes / f"started-{h}").exists() for h in hosts):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"the ranks did not start: {proc.communicate()}")
        time.sleep(0.05)


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_sigterm_to_the_script_reaches_every_rank_once(fakes, launcher):
    hosts = ["nodeA", "nodeB"]
    env = job_env(fakes, LAUNCHER=launcher, FAKE_HOSTS=" ".join(hosts), FAKE_RUN_S="30")
    proc = start_script("two-nodes", env, fakes)
    wait_for_ranks(fakes, hosts, proc)
    proc.send_signal(signal.SIGTERM)  # what `#SBATCH --signal=B:TERM@60` sends
    try:
        _, stderr = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the script did not end within 20 s of SIGTERM")
    assert proc.returncode == 143, stderr
    assert "SIGTERM: the time limit is near" in stderr
    assert [r["signal"] for r in records(fakes, "launcher-signal")] == [signal.SIGUSR1]
    ranks = records(fakes, "rank")
    assert sorted(r["host"] for r in ranks) == hosts
    for rank in ranks:
        # the launcher signalled the whole group: npmpi ignored SIGUSR1 and got one SIGTERM
        assert rank["usr1_ignored"] and rank["terms"] == 1, rank
    # the interrupted run is still analysed
    (analyze,) = records(fakes, "analyze")
    assert analyze["argv"][0] == f"{fakes}/runs/npmpi-two-nodes-4242.h5"


def test_sweep_starts_no_configuration_after_sigterm(fakes):
    env = job_env(fakes, FAKE_RUN_S="30", KERNELS="python c", TRANSPORTS="default tcp")
    proc = start_script("sweep", env, fakes)
    wait_for_ranks(fakes, ["node1"], proc)
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the script did not end within 20 s of SIGTERM")
    assert proc.returncode == 143, stderr
    (launch,) = records(fakes, "launch")
    assert launch["argv"][-1].endswith("-python-default.h5")
    assert stderr.count("not starting") == 3
    (analyze,) = records(fakes, "analyze")
    assert analyze["argv"][: analyze["argv"].index("--plots")] == [launch["argv"][-1]]
