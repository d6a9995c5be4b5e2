"""A run's model (npmpi_analysis/numbers/model.py, docs/analysis.md "Models"): synthetic curves of
known alpha and beta per regime and known noise give parameters inside their intervals, 95 %
intervals that cover the truth 90-98 % of the time over 200 seeded draws, breaks within one size of
the truth and one regime for one-regime data; a real run with a meter replaying constant power gives
E0 = P alpha and Eb = P / beta and a dynamic model of zero; the outputs (console, JSON, --model-csv,
API) and bad input as one line."""

from __future__ import annotations

import csv
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from npmpi_analysis.numbers import compute
from npmpi_analysis.numbers.model import ModelError, fit_time
from npmpi_analysis.numbers.segmented import choose_breaks

TRIALS = 7


def netpipe_like_sizes(upper: int) -> np.ndarray:
    """NetPIPE's pattern: each power of two with its neighbours 3 below and 3 above."""
    out = {1, 2, 3}
    p = 4
    while p <= upper:
        out.update({p - 3, p, p + 3})
        p *= 2
    return np.array(sorted(s for s in out if 1 <= s <= upper), dtype=np.int64)


def synthetic(sizes, regimes, noise: float, rng) -> SimpleNamespace:
    """An analysed ping-pong in memory: per size the regime (first size, alpha s, beta bit/s) that
    holds it, 7 trials of 10 iterations whose time per message has a relative normal noise."""
    iters = np.full(len(sizes), 10, dtype=np.int64)
    t = np.empty(len(sizes))
    for k, m in enumerate(sizes):
        _, alpha, beta = [r for r in regimes if m >= r[0]][-1]
        t[k] = alpha + 8.0 * m / beta
    per_msg = t[:, None] * (1.0 + noise * rng.standard_normal((len(sizes), TRIALS)))
    trial_s = per_msg * 2 * iters[:, None]
    bw = compute.bandwidth(sizes, iters, trial_s)
    return SimpleNamespace(attrs={}, bw=bw, path="synthetic.h5", power=None, sizes=len(sizes))


TWO = [(1, 2e-6, 10e9), (4093, 6e-6, 20e9)]  # eager, then rendezvous: a jump in alpha at 4093 B


def test_parameters_lie_within_their_intervals_and_the_breaks_are_found():
    """20 noisy draws of two regimes (a jump in alpha at 4093 B): the break found at 4093 B in 19 or
    more, each regime's alpha and beta inside its interval in 16 or more, every fit close."""
    sizes = netpipe_like_sizes(4 << 20)
    found, inside = 0, np.zeros((2, 2), dtype=int)
    for seed in range(20):
        a = synthetic(sizes, TWO, 0.01, np.random.default_rng(seed))
        model = fit_time(a, None, 500, seed)[0]
        assert model.breaks_source == "found"
        if model.breaks_bytes != [4093]:
            continue
        found += 1
        for k, (regime, (_, alpha, beta)) in enumerate(zip(model.regimes, TWO, strict=True)):
            inside[k] += [regime.alpha_s.contains(alpha), regime.beta_bit_s.contains(beta)]
            assert regime.r2 > 0.99 and regime.max_residual < 0.05
    assert found >= 19
    assert (inside >= 16).all(), inside


def test_three_regimes_found_within_one_size_of_the_truth():
    """A slope change alone (cache to memory) is found within one schedule step."""
    rng = np.random.default_rng(2)
    sizes = netpipe_like_sizes(8 << 20)
    truth = [(1, 1e-6, 5e9), (8189, 4e-6, 40e9), (262141, 10e-6, 10e9)]
    a = synthetic(sizes, truth, 0.005, rng)
    model = fit_time(a, None, 200, 1)[0]
    found = [int(np.searchsorted(sizes, b)) for b in model.breaks_bytes]
    true = [int(np.searchsorted(sizes, r[0])) for r in truth[1:]]
    assert len(found) == 2
    assert all(abs(f - t) <= 1 for f, t in zip(found, true, strict=True)), (model.breaks_bytes, truth)


def test_one_regime_is_fitted_as_one():
    """At most 1 of 20 noisy one-regime curves is split (the criterion's rate: about 1 in 40)."""
    rng = np.random.default_rng(3)
    split = 0
    for seed in range(20):
        a = synthetic(netpipe_like_sizes(1 << 22), [(1, 3e-6, 8e9)], 0.02, np.random.default_rng(seed))
        split += fit_time(a, None, 20, seed)[0].breaks_bytes != []
    assert split <= 1
    x = np.linspace(1, 100, 60)
    y = 2 + 0.5 * x + rng.normal(0, 0.1, 60)
    assert choose_breaks(x, y, np.ones(60)) == []


def test_intervals_cover_the_truth_about_95_percent_of_the_time():
    """200 seeded draws of one curve: each 95 % interval holds the true alpha and beta in 90-98 % of
    them (the breaks given, so the coverage is the bootstrap's alone)."""
    sizes = netpipe_like_sizes(1 << 16)
    alpha, beta = 2e-6, 10e9
    hits_a = hits_b = 0
    draws = 200
    for seed in range(draws):
        a = synthetic(sizes, [(1, alpha, beta)], 0.03, np.random.default_rng(1000 + seed))
        (regime,) = fit_time(a, [], 400, seed)[0].regimes
        hits_a += regime.alpha_s.lo <= alpha <= regime.alpha_s.hi
        hits_b += regime.beta_bit_s.lo <= beta <= regime.beta_bit_s.hi
    assert 0.90 * draws <= hits_a <= 0.98 * draws, hits_a
    assert 0.90 * draws <= hits_b <= 0.98 * draws, hits_b


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others():
    a = synthetic(netpipe_like_sizes(1 << 20), TWO, 0.02, np.random.default_rng(5))
    one, two, other = (fit_time(a, None, 300, s)[0].regimes[0].alpha_s for s in (11, 11, 12))
    assert (one.lo, one.hi) == (two.lo, two.hi)
    assert (one.lo, one.hi) != (other.lo, other.hi)
    assert one.value == other.value  # the fit itself is the data's


def test_given_breaks_that_are_no_size_or_leave_too_few_sizes_are_refused():
    a = synthetic(netpipe_like_sizes(1 << 20), TWO, 0.01, np.random.default_rng(6))
    with pytest.raises(ModelError, match="4000: not a message size of this run"):
        fit_time(a, [4000], 100, 1)
    with pytest.raises(ModelError, match="fewer than 3 sizes"):
        fit_time(a, [4093, 4096], 100, 1)
    few = synthetic(np.array([1, 2, 4]), TWO, 0.01, np.random.default_rng(6))
    with pytest.raises(ModelError, match="a model needs 4 or more"):
        fit_time(few, None, 100, 1)


def test_a_flat_regime_has_no_finite_beta():
    """Times that do not grow with the size: beta unbounded, never a negative bandwidth."""
    a = synthetic(netpipe_like_sizes(64), [(1, 1e-6, 1e30)], 0.02, np.random.default_rng(8))
    (regime,) = fit_time(a, [], 300, 1)[0].regimes
    assert regime.beta_bit_s.hi == math.inf
    assert regime.beta_bit_s.value > 1e12 or regime.beta_bit_s.value == math.inf


# ---------------------------------------------------------------- a real run, its outputs


WATTS = 90.0


@pytest.fixture(scope="module")
def constant_power_run(tmp_path_factory):
    """A real ping-pong with a power rank replaying a constant 90 W (before, during and after).

    Every size's window holds samples, so no size's power is flagged and the energy model fits the
    sizes the time model does (a window of 0.1 s at 0.02 s sampling lost its samples under other
    jobs' load, and the identities below then held for other sizes): windows of 0.1 s or more
    sampled every 5 ms (20 samples or more), the 17 sizes of powers of two."""
    from conftest import run_mpi

    d = tmp_path_factory.mktemp("model_run")
    (d / "trace.csv").write_text(f"time_s,power_w\n0,{WATTS}\n100000,{WATTS}\n")
    args = ["-l", "1", "-u", "64K", "-p", "0", "--trials", "5", "--target-time", "0.02", "--baseline", "0.3"]
    args += ["--meter", "replay:trace.csv,interval=0.005", "-q", "-o", "r.h5"]
    proc = run_mpi(args, np=3, cwd=d)
    assert proc.returncode == 0, proc.stderr
    return d / "r.h5"


@pytest.mark.mpi
@pytest.mark.slow
def test_constant_power_gives_energy_as_power_times_the_time_model(constant_power_run):
    from npmpi_analysis import open_run

    run = open_run(constant_power_run)
    model = run.analysis.model
    assert model is not None and model.energy_j is not None and model.energy_left_out == []
    for r in model.regimes:
        e, d = r.energy, r.dynamic
        assert e.per_message_j.value == pytest.approx(WATTS * r.alpha_s.value, rel=1e-6)
        assert e.per_message_j.lo <= WATTS * r.alpha_s.value <= e.per_message_j.hi
        if math.isfinite(r.beta_bit_s.value):
            assert e.per_bit_j.value == pytest.approx(WATTS / r.beta_bit_s.value, rel=1e-6, abs=1e-18)
        else:  # a flat regime: its time slope was zero or below (noise under load), the energy's too
            assert e.per_bit_j.value <= 1e-18
        assert d.per_message_j.lo <= 0.0 <= d.per_message_j.hi
        assert d.per_bit_j.lo <= 0.0 <= d.per_bit_j.hi
        assert abs(d.per_message_j.value) <= 1e-9 * WATTS * abs(r.alpha_s.value) + 1e-18
    table = run.model
    assert list(table["alpha_s"]) == [r.alpha_s.value for r in model.regimes]


@pytest.mark.mpi
@pytest.mark.slow
def test_console_json_and_model_csv_carry_the_model(constant_power_run, tmp_path, capsys):
    from npmpi_analysis.cli import main

    code = main(
        [str(constant_power_run), "--json", str(tmp_path / "r.json"), "--model-csv", str(tmp_path / "m.csv")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "  model: t = alpha + bits/beta" in out and "resamples, seed 20090" in out
    assert "dynamic model (power above idle):" in out and "below resolution (< " in out
    model = json.loads((tmp_path / "r.json").read_text())["runs"][0]["summary"]["model"]
    assert model["bootstrap_resamples"] == 1000 and model["bootstrap_seed"] == 20090
    first = model["regimes"][0]
    for key in ("alpha_s", "beta_bit_s", "energy_per_message_j", "energy_per_bit_j"):
        assert key in first and key + "_lo" in first and key + "_hi" in first
    assert first["dynamic_per_message_below_resolution"] is True
    rows = list(csv.DictReader((tmp_path / "m.csv").read_text().splitlines()))
    assert len(rows) == len(model["regimes"])
    assert float(rows[0]["alpha_s"]) == pytest.approx(first["alpha_s"], rel=1e-12)


@pytest.mark.mpi
@pytest.mark.slow
def test_bad_model_input_is_one_line(constant_power_run, tmp_path, capsys):
    from npmpi_analysis.cli import main

    assert main([str(constant_power_run), "-q", "--model-breaks", "5000"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--model-breaks 5000: not a message size of this run" in err[0]
    for bad in (["--model-breaks", "4X"], ["--model-resamples", "3"], ["--model-breaks", "0"]):
        assert main([str(constant_power_run), "-q", *bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("npmpi-analyze: error: --model-"), err


def test_a_file_with_too_few_sizes_or_no_power_says_so(tmp_path, capsys):
    from npmpi_analysis.cli import main
    from npmpi_analysis.synthetic import write_run

    t0 = 1.7e9
    write_run(tmp_path / "few.h5", [1, 2], [10, 10], [[1e-5] * 3] * 2, [[t0 + k for k in range(3)]] * 2)
    assert main([str(tmp_path / "few.h5")]) == 0
    assert (
        "model: none (few.h5: 2 size(s) with a time: a model needs 4 or more (no model))"
        in capsys.readouterr().out
    )
    sizes = [1, 2, 4, 8, 16]
    trials = [[(1e-6 + 8 * s / 1e10) * 20 * (1 + 0.01 * j) for j in range(3)] for s in sizes]
    write_run(tmp_path / "np.h5", sizes, [10] * 5, trials, [[t0 + k for k in range(3)]] * 5)
    assert main([str(tmp_path / "np.h5")]) == 0
    out = capsys.readouterr().out
    assert "  model: t = alpha" in out and "dynamic model" not in out


def coll_series_file(path, op: str, ranks: int, alpha: float, beta: float):
    """A synthetic coll file of one op at one rank count: Hockney's curve of `alpha` and `beta` per
    operation over 8 sizes, 5 trials of 100 operations with 1 % noise, no power."""
    rng = np.random.default_rng(ranks)
    sizes = [2**k for k in range(4, 20, 2)]
    t = np.array([alpha + 8 * s / beta for s in sizes])
    trials = (t[:, None] * 100) * (1 + 0.01 * rng.standard_normal((len(sizes), 5)))
    starts = [[1.7e9 + 10 * k + j for j in range(5)] for k in range(len(sizes))]
    attrs = {"kind": "coll", "mode": "coll", "bytes_per_iteration_factor": 1, "one_way_divisor": 1}
    attrs |= {"coll_op": op, "coll_ranks": ranks, "coll_bus_factor": 1.0, "coll_bus_factor_formula": "1"}
    from npmpi_analysis.synthetic import write_run

    return write_run(path, sizes, [100] * len(sizes), trials.tolist(), starts, attrs=attrs)


def test_a_collective_s_alpha_growth_with_the_rank_count_is_named(tmp_path, capsys):
    """allreduce's alpha grows as log2 n, alltoall's as n: each named with its R²; two rank counts
    cannot tell the laws apart, and say so."""
    from npmpi_analysis.cli import main

    files = []
    for n in (2, 4, 8, 16, 32):
        files.append(
            coll_series_file(tmp_path / f"ar{n}.h5", "allreduce", n, 1e-6 + 2e-6 * math.log2(n), 5e9)
        )
        files.append(coll_series_file(tmp_path / f"aa{n}.h5", "alltoall", n, 1e-6 + 1e-6 * n, 5e9 / n))
    assert main([*map(str, files), "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    rows = {r["op"]: r for r in json.loads((tmp_path / "s.json").read_text())["model_scaling"]}
    assert rows["allreduce"]["ranks"] == [2, 4, 8, 16, 32]
    assert rows["allreduce"]["alpha_fit"]["better"] == "log2 n"
    assert rows["allreduce"]["alpha_fit"]["log2 n"]["slope"] == pytest.approx(2e-6, rel=0.1)
    assert rows["alltoall"]["alpha_fit"]["better"] == "n"
    assert rows["alltoall"]["alpha_fit"]["n"]["slope"] == pytest.approx(1e-6, rel=0.1)
    assert "allreduce at 2, 4, 8, 16, 32 ranks: alpha = " in out and "(fits log2 n better: R² " in out
    assert main([str(files[0]), str(files[2]), "-q", "--json", str(tmp_path / "two.json")]) == 0
    (two,) = json.loads((tmp_path / "two.json").read_text())["model_scaling"]
    assert two["alpha_fit"]["better"] == "" and "three or more tell log2 n from n" in two["alpha_fit"]["why"]


def test_the_resolution_by_hand():
    """Two nodes: per size the spread s_p over n distinct readings, idle spreads 0.3 and 0.4 W over
    100 and 25 readings: the smallest dynamic power told from zero is 2 sqrt(s_p²/n + u_idle²),
    u_idle² = 0.3²/100 + 0.4²/25; a window D resolves P when D >= s² tau / ((P/2)² - u_idle²)."""
    from npmpi_analysis.numbers.model_energy import resolution

    def stats(sigma, count):
        return SimpleNamespace(sigma=np.array(sigma, dtype=float), count=np.array(count))

    channel = SimpleNamespace(sample_interval_s=0.1, refresh=(0.5, "bmc"))
    nodes = [
        SimpleNamespace(sizes=stats([0, 0], [4, 9]), idle=stats([0.3], [100]), channels=[channel]),
        SimpleNamespace(sizes=stats([0, 0], [16, 9]), idle=stats([0.4], [25]), channels=[]),
    ]
    power = SimpleNamespace(job_sigma_w=np.array([1.0, 2.0]), nodes=nodes, idle_w=100.0)
    bw = SimpleNamespace(size_bytes=np.array([8, 1024]), trials_run=np.array([7, 7]))
    a = SimpleNamespace(power=power, attrs={}, bw=bw, sizes=2)
    t = np.array([1e-6, 4e-6])
    res = resolution(a, t)
    u_idle2 = 0.3**2 / 100 + 0.4**2 / 25
    expect = 2 * np.sqrt(np.array([1.0 / 4, 4.0 / 9]) + u_idle2)  # the fewer readings of the two nodes
    assert np.allclose(res.power_w, expect)
    assert np.allclose(res.per_message_j, expect * t)
    assert np.allclose(res.per_bit_j, expect * t / (8 * np.array([8, 1024])))
    assert res.period_s == 0.5 and res.reading_sigma_w == pytest.approx(0.5)  # sqrt(0.3² + 0.4²)
    assert res.window_for(1.0) == pytest.approx(0.25 * 0.5 / (0.25 - u_idle2))
    assert res.window_for(2 * math.sqrt(u_idle2) * 0.99) == math.inf  # the idle mean alone is more


def test_a_map_gives_each_link_alpha_beta_with_intervals(tmp_path, capsys):
    """A synthetic 6-node map of known latency and bandwidth, one link 2x slower, jitter +-1 %
    over 7 trials: each link's alpha and beta (through its 3 sizes) hold the truth in their 95 %
    intervals (or nearly: the few that miss, by little), the slow link's are 2x worse; the CSV and
    JSON carry them, the summary the medians."""
    from npmpi_analysis.cli import main
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    truth = MapTruth([f"n{k}" for k in range(6)], slow_links={(1, 4): 0.5}, jitter=0.01, trials=7, seed=3)
    path = write_map(tmp_path / "m.h5", truth)
    assert main([str(path), "--csv", str(tmp_path / "m.csv"), "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "model per link (t = alpha + bits/beta through its 3 sizes" in out
    rows = [
        r for r in csv.DictReader((tmp_path / "m.csv").read_text().splitlines()) if r["size_bytes"] == "1"
    ]
    assert len(rows) == 15
    inside = 0
    for r in rows:
        slow = {r["host_a"], r["host_b"]} == {"n1", "n4"}
        alpha, beta = truth.latency_s / (0.5 if slow else 1), truth.bandwidth_bit_s * (0.5 if slow else 1)
        a, lo, hi = (float(r[f"model_alpha{k}_s"]) for k in ("", "_lo", "_hi"))
        b, blo, bhi = (float(r[f"model_beta{k}_bit_s"]) for k in ("", "_lo", "_hi"))
        inside += (lo <= alpha <= hi) + (blo <= beta <= bhi)
        assert a == pytest.approx(alpha, rel=0.05) and b == pytest.approx(beta, rel=0.02)
    assert inside >= 26  # of 30: 95 % intervals
    from npmpi_analysis import open_run

    assert len(open_run(path).model) == 0  # run.model is a run's regimes: a map's links are in its tables
    doc = json.loads((tmp_path / "m.json").read_text())["maps"][0]
    assert doc["summary"]["median_model_beta_bit_s"] == pytest.approx(truth.bandwidth_bit_s, rel=0.01)
    assert len(doc["model_alpha_s"]) == 6


def drift_file(path, within: float, across_per_min: float, seed: int):
    """Hockney's curve over 40 sizes measured in a random order, one size every 3 s: each trial j
    (of 7) 1 + within x j times its size's time, each size 1 + across x minutes since the start."""
    from npmpi_analysis.synthetic import write_run

    rng = np.random.default_rng(seed)
    sizes = np.unique(np.geomspace(1, 1 << 20, 40).astype(int))
    order = rng.permutation(len(sizes))
    minutes = order * 3 / 60.0
    t = (2e-6 + 8 * sizes / 10e9) * (1 + across_per_min * minutes)
    trials = (
        t[:, None] * 200 * (1 + within * np.arange(7)) * (1 + 0.002 * rng.standard_normal((len(sizes), 7)))
    )
    starts = [[1.7e9 + 3 * o + 0.3 * j for j in range(7)] for o in order]
    return write_run(path, sizes.tolist(), [100] * len(sizes), trials.tolist(), starts)


def test_drift_within_sizes_and_across_the_run_is_seen_with_its_interval(tmp_path):
    from npmpi_analysis import open_run

    quiet = open_run(drift_file(tmp_path / "q.h5", 0.0, 0.0, 1)).summary["drift"]
    assert not quiet["within_sizes"]["drift"] and not quiet["across_run"]["drift"]
    warm = open_run(drift_file(tmp_path / "w.h5", 0.01, 0.0, 2)).summary["drift"]["within_sizes"]
    truth = 1.0 / 1.03  # 1 % of the first trial's time per trial, in % of the mean of 7 (1 + 0.03)
    assert warm["drift"] and warm["slope_lo_percent_per_trial"] < truth < warm["slope_hi_percent_per_trial"]
    hot = open_run(drift_file(tmp_path / "h.h5", 0.0, 0.05, 3)).summary["drift"]["across_run"]
    assert hot["drift"] and hot["slope_percent_per_minute"] == pytest.approx(5.0, rel=0.25)


def test_what_precision_gave_each_size_is_said(tmp_path, capsys):
    """A file of --precision 1 % (root attribute precision 0.01): per size the half-width from its
    stored trials and whether within 1 %, and the summary's count and the sizes that were not."""
    from npmpi_analysis.cli import main
    from npmpi_analysis.synthetic import write_run

    quiet = [1.0, 1.001, 0.999, 1.0, 1.0005, 0.9995, 1.0] + [math.nan] * 3
    noisy = [1.0, 1.2, 0.8, 1.1, 0.9, 1.3, 0.7, 1.05, 0.95, 1.0]
    sizes = [1, 2, 4, 8]
    trials = [quiet, noisy, quiet, quiet]
    starts = [[1.7e9 + 20 * k + j for j in range(10)] for k in range(4)]
    attrs = {"precision": 0.01, "precision_cap_s": 9.0, "precision_max_trials": 10}
    write_run(tmp_path / "p.h5", sizes, [100] * 4, trials, starts, attrs=attrs)
    assert (
        main([str(tmp_path / "p.h5"), "--csv", str(tmp_path / "p.csv"), "--json", str(tmp_path / "p.json")])
        == 0
    )
    out = capsys.readouterr().out
    assert "precision: 1 % asked" in out and "reached at 3 of 4 sizes with 7 to 10 trials" in out
    assert "not at 2 B" in out
    rows = list(csv.DictReader((tmp_path / "p.csv").read_text().splitlines()))
    assert [r["precision_reached"] for r in rows] == ["True", "False", "True", "True"]
    from npmpi.core.sampling import relative_halfwidth

    assert float(rows[1]["precision_rel_halfwidth"]) == pytest.approx(relative_halfwidth(noisy))
    s = json.loads((tmp_path / "p.json").read_text())["runs"][0]["summary"]["precision"]
    assert s["sizes_not_reached_bytes"] == [2] and s["max_trials"] == 10 and s["precision_cap_s"] == 9.0


def test_two_maps_compared_say_which_links_models_moved_beyond_noise(tmp_path, capsys):
    """Before, and after with one link 2x slower: that link's alpha and beta are slower beyond their
    intervals, the others (the same truth, other jitter) mostly the same."""
    from npmpi_analysis.cli import main
    from npmpi_analysis.map.synthetic import MapTruth, write_map

    hosts = [f"n{k}" for k in range(6)]
    before = write_map(tmp_path / "b.h5", MapTruth(hosts, jitter=0.01, trials=7, seed=1))
    after = write_map(
        tmp_path / "a.h5", MapTruth(hosts, slow_links={(1, 4): 0.5}, jitter=0.01, trials=7, seed=2)
    )
    assert main([str(before), str(after), "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "each link's model, after / before beyond its 95 % interval (15 links): alpha: " in out
    (change,) = json.loads((tmp_path / "c.json").read_text())["comparison"]
    v = change["model_verdicts"]
    assert v["beta"]["slower"] >= 1 and v["alpha"]["slower"] >= 1
    assert v["beta"]["same"] >= 12 and v["beta"]["links"] == 15


def test_a_map_with_power_says_what_its_meters_resolve_per_pair(tmp_path, capsys):
    from npmpi_analysis.cli import main
    from test_map_analysis import power_map

    path = power_map(tmp_path / "m.h5")
    assert main([str(path), "--json", str(tmp_path / "m.json")]) == 0
    out = capsys.readouterr().out
    assert "  resolution: a pair's dynamic power is told from zero above (median over the pairs) " in out
    res = json.loads((tmp_path / "m.json").read_text())["maps"][0]["summary"]["resolution"]
    assert all(w is not None and w > 0 for w in res["dynamic_power_resolution_w_median"])
    assert res["meter_period_s"] > 0


def test_a_maps_models_made_a_block_of_rows_at_a_time_are_the_same_numbers(tmp_path, monkeypatch):
    """The links' models are made a block of rows of the matrices at a time (a 4,096-node map's
    temporaries were 2.2 GB): one row, or three, at a time give every number of the whole at
    once, the energy per bit's too."""
    from npmpi_analysis.cli import ANALYSED_SAMPLE_FIELDS
    from npmpi_analysis.map import model
    from npmpi_analysis.map.analyse import analyse_map
    from npmpi_analysis.map.load import load_map
    from test_map_analysis import power_map

    a = analyse_map(load_map(power_map(tmp_path / "m.h5"), ANALYSED_SAMPLE_FIELDS), "m")
    whole = model.link_models(a)
    assert whole.energy_per_bit_j is not None and np.isfinite(whole.beta_bit_s).sum() == 12
    for rows in (1, 3):
        monkeypatch.setattr(model, "MODEL_BLOCK", rows * len(a.size_bytes) * a.nodes)
        blocks = model.link_models(a)
        for name in vars(whole):
            assert np.array_equal(getattr(blocks, name), getattr(whole, name), equal_nan=True), name
