"""The run file written and read back (npmpi/runfile/): every field round-trips, a file cut off
mid-run keeps its completed sizes, a half-appended row is ignored, an existing file is never
overwritten, and damaged or forged files give one clear error."""

from __future__ import annotations

import h5py
import numpy as np
import pytest

from npmpi.core.errors import RunFileError
from npmpi.runfile.format import FORMAT_VERSION, SAMPLE_FIELDS, SizeResult
from npmpi.runfile.reader import load_run
from npmpi.runfile.writer import RunWriter

LAYOUT = {"host": ["a", "a"], "node_index": [0, 0], "role": ["transmitter", "reflector"]}


def write(path, rows, trials=3, finish="complete", **attrs):
    w = RunWriter(path, {"kernel": "python", "options_json": {"trials": trials}, **attrs}, LAYOUT, trials)
    for r in rows:
        w.append(r)
    if finish:
        w.finish(finish, "done")
    else:
        w.close()
    return path


def row(size, iters=10, times=(0.01, 0.012, 0.011)):
    start = [1000.0 + i for i in range(len(times))]
    return SizeResult(size, iters, 2, list(times), start, [s + t for s, t in zip(start, times, strict=True)])


def test_round_trip(tmp_path):
    p = write(tmp_path / "r.h5", [row(1), row(2, 20, (0.02, 0.021, 0.019))])
    run = load_run(p)
    assert run.status == "complete" and run.notices == []
    assert run.attrs["format"] == "npmpi-run"
    assert run.attrs["format_version"] == f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}"
    assert run.option("trials") == 3
    pp = run.pingpong
    assert pp.size_bytes.tolist() == [1, 2] and pp.iterations.tolist() == [10, 20]
    assert pp.trial_s.shape == (2, 3)
    np.testing.assert_allclose(pp.trial_s[1], [0.02, 0.021, 0.019])
    # NetPIPE's one-way time: best trial / (2 * iterations)
    np.testing.assert_allclose(pp.one_way_s, [0.01 / 20, 0.019 / 40])
    assert list(run.layout["host"]) == ["a", "a"] and list(run.layout["role"]) == ["transmitter", "reflector"]


def test_file_cut_off_mid_run_keeps_completed_sizes(tmp_path):
    p = write(tmp_path / "r.h5", [row(1), row(2)], finish=None)  # never finished: status stays running
    run = load_run(p)
    assert run.status == "running" and len(run.pingpong) == 2
    assert any("did not finish" in n for n in run.notices)


def test_partially_appended_row_is_ignored(tmp_path):
    p = write(tmp_path / "r.h5", [row(1), row(2)])
    with h5py.File(p, "a") as f:  # as if the writer died after extending only some datasets
        f["pingpong/size_bytes"].resize(3, axis=0)
        f["pingpong/size_bytes"][2] = 4
    run = load_run(p)
    assert len(run.pingpong) == 2
    assert any("partially written" in n for n in run.notices)


def test_interrupted_status_is_a_notice(tmp_path):
    p = write(tmp_path / "r.h5", [row(1)], finish="interrupted")
    run = load_run(p)
    assert run.status == "interrupted" and "interrupted" in run.notices[0]


def test_existing_file_is_not_overwritten(tmp_path):
    p = write(tmp_path / "r.h5", [row(1)])
    with pytest.raises(FileExistsError):
        RunWriter(p, {}, LAYOUT, 3)
    w = RunWriter(p, {}, LAYOUT, 3, overwrite=True)
    w.finish("complete")
    assert len(load_run(p).pingpong) == 0


@pytest.mark.parametrize(
    "setup,fragment",
    [
        ("missing", "no such file"),
        ("text", "not an HDF5 file"),
        ("other_format", "not an npmpi run file"),
        ("newer", "newer npmpi"),
        ("no_pingpong", "/pingpong is missing"),
        ("no_dataset", "/pingpong/trial_s is missing"),
        ("negative_time", "non-positive"),
        ("truncated", "cannot be opened"),
        ("directory", "is a directory"),
    ],
)
def test_bad_files_give_clear_errors(tmp_path, setup, fragment):
    p = tmp_path / "r.h5"
    if setup == "text":
        p.write_text("bytes  Mbps  seconds\n")
    elif setup == "directory":
        p.mkdir()
    elif setup != "missing":
        write(p, [row(1), row(2)])
        if setup == "truncated":
            data = p.read_bytes()
            p.write_bytes(data[: len(data) // 3])
        else:
            with h5py.File(p, "a") as f:
                if setup == "other_format":
                    f.attrs["format"] = "something-else"
                elif setup == "newer":
                    f.attrs["format_version"] = f"{FORMAT_VERSION[0] + 1}.0"
                elif setup == "no_pingpong":
                    del f["pingpong"]
                elif setup == "no_dataset":
                    del f["pingpong/trial_s"]
                elif setup == "negative_time":
                    f["pingpong/trial_s"][0, 1] = -1.0
    with pytest.raises(RunFileError) as e:
        load_run(p)
    assert fragment in str(e.value)


def test_load_run_reads_only_the_sample_fields_asked_for(tmp_path):
    from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

    t = 1.7e9 + np.arange(10.0)
    nodes = [SynthNode([SynthChannel(t, np.full(10, 50.0), sample_interval_s=1.0)])]
    path = write_run(tmp_path / "r.h5", [1], [10], [[1.0]], [[1.7e9 + 2]], nodes=nodes)
    full = load_run(path)
    ch = full.power[0].channels[0]
    assert all(getattr(ch, name) is not None and len(getattr(ch, name)) == 10 for name in SAMPLE_FIELDS)
    part = load_run(path, ("time_unix_s", "power_w")).power[0].channels[0]
    assert np.array_equal(part.power_w, ch.power_w) and np.array_equal(part.time_unix_s, ch.time_unix_s)
    assert part.energy_j is None and part.volts is None and part.amps is None


def test_fields_not_read_are_still_checked_for_forged_shapes(tmp_path):
    import h5py
    from npmpi_analysis.synthetic import SynthChannel, SynthNode, write_run

    t = 1.7e9 + np.arange(10.0)
    nodes = [SynthNode([SynthChannel(t, np.full(10, 50.0), sample_interval_s=1.0)])]
    path = write_run(tmp_path / "r.h5", [1], [10], [[1.0]], [[1.7e9 + 2]], nodes=nodes)
    with h5py.File(path, "r+") as f:  # volts claims more rows than the file holds (no data written)
        del f["power/node0/channel0/volts"]
        name = "power/node0/channel0/volts"
        f.create_dataset(name, shape=(10**8,), maxshape=(None,), chunks=(1024,), dtype="f8")
    with pytest.raises(RunFileError, match="/power/node0/channel0/volts claims shape"):
        load_run(path, ("time_unix_s", "power_w"))
