"""npmpi's ReFrame checks: the sweep (a pair within a node, and across two nodes), the cluster map and
a collective, with performance variables read from `npmpi-analyze --json` (npmpi_results.py).

    reframe -C jobs/reframe/settings.py -c jobs/reframe/npmpi_checks.py -r

npmpi is a fixture (npmpi_install): by default installed from this source tree into a virtual
environment in ReFrame's stage directory by its scripts/setup.sh, as a site installs it;
`-S npmpi_install.venv=PATH` uses an installed one instead. Everything a site sets per partition
is in its configuration's `extras` (settings.py shows each): the nodes it has, the meter, npmpi's
options per check, the mpirun options, the references and their tolerances. How a site adds the
checks to its suite: docs/clusters.md, "ReFrame".

Sanity is npmpi's own: the run file's status, npmpi-analyze's integrity check (its exit status: it
verifies the file's checksums and attribute seals), no problem reported, the pair placed as asked,
power when a meter was asked (measured, not estimated, where the partition says so), headline energy
figures from unflagged sizes. Each failure is one line in npmpi's words.
"""

from __future__ import annotations

import os
import sys

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import fixture, parameter, run_after, run_before, sanity_function, variable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import npmpi_results

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_FILE, JSON_FILE, ANALYZE_STATUS = "npmpi.h5", "npmpi.json", "analyze.status"


class npmpi_install(rfm.RunOnlyRegressionTest):
    """npmpi in a virtual environment: made in the stage directory by the source tree's own
    scripts/setup.sh (as a site installs it: README.md), or the one at `venv` (an installed npmpi:
    scripts/setup.sh's .venv, a site's module)."""

    venv = variable(str, value="")
    source = variable(str, value=SOURCE)
    python = variable(str, value="python3")
    # scripts/setup.sh's NPMPI_MPI: `wheel` (pip's Open MPI: no system MPI needed), `mpich` (pip's
    # MPICH) or `system` (the site's mpicc on PATH: mpi4py and the C kernel are built against it)
    mpi = variable(str, value="wheel")
    local = True
    valid_systems = ["*"]
    valid_prog_environs = ["*"]

    @run_before("run")
    def install(self):
        if not self.venv:
            setup = os.path.join(self.source, "scripts", "setup.sh")
            self.prerun_cmds = [f'NPMPI_VENV="$PWD/venv" NPMPI_MPI={self.mpi} PYTHON={self.python} "{setup}"']
        self.executable = os.path.join(self.venv or "venv", "bin", "python")
        self.executable_opts = ["-m", "npmpi", "--version"]

    @sanity_function
    def imports(self):
        return sn.assert_found(r"^npmpi \d", self.stdout, msg="npmpi is not installed in the environment")

    @property
    def bin_dir(self) -> str:
        return os.path.join(self.venv or os.path.join(self.stagedir, "venv"), "bin")


class NpmpiBase(rfm.RunOnlyRegressionTest):
    """What the three checks share: the command, the analysis, sanity and performance variables."""

    npmpi = fixture(npmpi_install, scope="session")
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    time_limit = "15m"
    # the partition's extras give each of these unless set with -S
    meter = variable(str, value="")  # a meter spec (docs/meters.md); extras `meter`
    args = variable(str, value="")  # npmpi's options; extras `npmpi_args`[family]
    family = ""  # the key of this check in the extras' `npmpi_args` and `npmpi_references`
    kind_args: tuple[str, ...] = ()

    def _extras(self) -> dict:
        return self.current_partition.extras

    @run_after("setup")
    def configure(self):
        extras = self._extras()
        self.meter = self.meter or extras.get("meter", "")
        self.args = self.args or extras.get("npmpi_args", {}).get(self.key(), "")
        refs = extras.get("npmpi_references", {}).get(self.key(), {})
        self.reference = {self.current_partition.fullname: {k: tuple(v) for k, v in refs.items()}}
        self.power_ranks = 1 if self.meter else 0
        self.place()

    def key(self) -> str:
        """The check's name in the extras' `npmpi_args` and `npmpi_references`."""
        return self.family

    def place(self):
        """num_tasks and num_tasks_per_node (the checks' own)."""
        raise NotImplementedError

    @run_before("run")
    def command(self):
        bin_dir = self.npmpi.bin_dir
        self.prerun_cmds = [f'export PATH="{bin_dir}:$PATH"']  # pip's mpirun, when npmpi brought it
        self.job.launcher.options = list(self._extras().get("mpirun_options", []))
        self.executable = os.path.join(bin_dir, "python")
        meter = ["--meter", self.meter] if self.meter else []
        self.executable_opts = ["-m", "npmpi", *self.kind_args, *self.args.split(), *meter, "-o", RUN_FILE]
        self.postrun_cmds = [
            f'"{bin_dir}/npmpi-analyze" {RUN_FILE} --json {JSON_FILE} -q',
            f"echo $? > {ANALYZE_STATUS}",
        ]

    def _doc(self) -> dict:
        return npmpi_results.read(os.path.join(self.stagedir, JSON_FILE))

    def expect(self) -> dict:
        measured = bool(self._extras().get("measured_power", False))
        return {"meter": bool(self.meter), "measured": measured and bool(self.meter)}

    @sanity_function
    def sound(self):
        try:
            with open(os.path.join(self.stagedir, ANALYZE_STATUS)) as f:
                status = int(f.read().strip())
        except (OSError, ValueError):
            status = None
        problems = npmpi_results.problems(self._doc(), status, self.expect())
        message = "; ".join(problems).replace("{", "{{").replace("}", "}}")
        return sn.assert_true(not problems, msg=message or "sound")

    @run_before("performance")
    def set_perf_variables(self):
        values = npmpi_results.figures(self._doc())
        self.perf_variables = {
            name: sn.make_performance_function(_value(value), npmpi_results.FIGURE_UNITS[name])
            for name, value in values.items()
            if value == value  # not NaN
        }


def _value(x: float):
    return lambda: x


@rfm.simple_test
class NpmpiSweep(NpmpiBase):
    """The ping-pong sweep of one pair: within one node, or across two (one rank each)."""

    placement = parameter(["one-node", "two-nodes"])

    def key(self) -> str:
        return f"sweep-{self.placement}"

    def place(self):
        nodes = 2 if self.placement == "two-nodes" else 1
        self.skip_if(
            nodes > int(self._extras().get("nodes", 1)),
            f"the pair across nodes needs two nodes: partition {self.current_partition.fullname} has one",
        )
        per_node = (2 // nodes) + self.power_ranks
        self.num_tasks, self.num_tasks_per_node = per_node * nodes, per_node

    def expect(self) -> dict:
        return {**super().expect(), "pair_crosses_nodes": self.placement == "two-nodes"}


@rfm.simple_test
class NpmpiMap(NpmpiBase):
    """The cluster map of the partition's nodes (with one node: its ranks, --per-rank)."""

    family = "map"
    kind_args = ("map", "--confirm", "0")

    def place(self):
        nodes = int(self._extras().get("nodes", 1))
        if nodes < 2:
            self.kind_args = (*self.kind_args, "--per-rank")
            self.num_tasks = self.num_tasks_per_node = 2 + self.power_ranks
        else:
            self.num_tasks_per_node = 1 + self.power_ranks
            self.num_tasks = nodes * self.num_tasks_per_node


@rfm.simple_test
class NpmpiColl(NpmpiBase):
    """A collective (`python -m npmpi coll`, allreduce by default: set --op in npmpi_args) on two ranks
    of one node, its energy per operation with a meter."""

    family = "coll"
    kind_args = ("coll",)

    def place(self):
        self.num_tasks = self.num_tasks_per_node = 2 + self.power_ranks
