"""The map file: a run file (npmpi/runfile/writer.py) with the group /map, written round by round.

The file has the run's root attributes, /layout and (with meters) /power exactly as a sweep writes
them, an empty /pingpong, and /map (docs/file-format.md, "The map"): each measured pair a row
(npmpi/runfile/maprows.py, format 2.0), every per-pair dataset allocated at the start, NaN (or 0)
where not measured yet, each round's rows written at once and flushed as it completes, so a map
stopped at any moment keeps every completed round. `maprows.derived` computes the latency and bandwidth
matrices from dense one-way times (the analysis's, and the console's from the writer's best times).
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass

import numpy as np

from npmpi.core.errors import RunFileWriteError
from npmpi.runfile.format import (
    CHECKSUM,
    COND_DATASETS,
    MAP_FORMAT_VERSION,
    TEXT_CHECKSUM,
    checksum,
    text_crc32,
)
from npmpi.runfile.maprows import (
    COND_PREFIX,
    LAYOUT_ATTR,
    PAIR,
    ROUND_FIRST_ROW,
    ROWS_LAYOUT,
    chunk_rows,
    row_datasets,
    row_index,
    rows_data_bytes,
    warnings_off,
)
from npmpi.runfile.writer import RunWriter

MAP_GROUP = "map"
# /map/cond_<COND_DATASETS name> [S, P, 2]: the conditions of a pair's measurement, side 0 the
# transmitter's, side 1 the reflector's (docs/file-format.md, "1.10"); the text per rank is the
# JSON of /map/COND_TEXT, as a run's root attribute COND_ATTR (a dataset: a map's many ranks' text
# may outgrow an attribute's 64 KiB)
COND_TEXT = "conditions_json"
COND_TEXT_EVERY_S = 2.0
COND_SIDES = ("transmitter", "reflector")


@dataclass
class PairResult:
    """One pair's measurement at one size, as its transmitter reports it."""

    i: int  # member indices, i < j; with `directed`, i transmitted to j (either may be the lower)
    j: int
    iterations: int
    untimed_iterations: int  # probe and warm-up, inside the round's window
    trial_s: np.ndarray  # [trials] each trial's loop time; NaN for a trial that did not run
    directed: bool = False  # one direction of the pair (a stream map's i -> j), not both
    elapsed_s: float = float("nan")  # from the round's go to the end of this transmitter's work
    runq_wait_s: np.ndarray | None = None  # [trials, 2] the transmitter's and the reflector's run-queue
    # wait during each trial (npmpi/persize/cputime.py); NaN where not run or not known
    cond: np.ndarray | None = None  # [2, COND_DATASETS] the transmitter's and the reflector's conditions
    cond_info: list[dict] | None = None  # each side's text (with its "rank"): source or reason, counters


# the bytes of /map's datasets once every round is stored, before compression (maprows.py)
map_data_bytes = rows_data_bytes


def rounds_of_matrix(matrix, n_rounds: int) -> list[list[tuple[int, int]]]:
    """A schedule's rounds (pairs i < j) from its [N, N] round matrix."""
    m = np.asarray(matrix)
    i, j = np.nonzero(np.triu(m >= 0, 1))
    rounds: list[list[tuple[int, int]]] = [[] for _ in range(n_rounds)]
    for a, b in zip(i.tolist(), j.tolist(), strict=True):
        if 0 <= m[a, b] < n_rounds:
            rounds[int(m[a, b])].append((a, b))
    return rounds


def _waits(res: PairResult, trials: int) -> np.ndarray:
    """[trials, 2] the result's run-queue waits, NaN where not known."""
    out = np.full((trials, 2), np.nan)
    if res.runq_wait_s is not None:
        w = np.asarray(res.runq_wait_s, dtype=np.float64).reshape(-1, 2)[:trials]
        out[: len(w)] = w
    return out


def _cond(res: PairResult) -> np.ndarray:
    """[2, COND_DATASETS] the result's conditions (transmitter, reflector), NaN where not known."""
    got = np.asarray(res.cond if res.cond is not None else [], dtype=np.float64)
    return got if got.shape == (2, len(COND_DATASETS)) else np.full((2, len(COND_DATASETS)), np.nan)


def _one_way(res: PairResult, f, trials: int) -> tuple[np.ndarray, np.ndarray]:
    """([trials] one-way time per iteration of each trial, NaN where not run; the loop times given)."""
    one_way = np.full(trials, np.nan)
    times = np.asarray(res.trial_s, dtype=np.float64)[:trials]
    one_way[: len(times)] = times / (f.one_way_factor * res.iterations)
    return one_way, times


def _loop_s(res: PairResult, trials: int) -> np.ndarray:
    """[trials] each trial's loop time (s) as measured, NaN where not run."""
    out = np.full(trials, np.nan)
    times = np.asarray(res.trial_s, dtype=np.float64)[:trials]
    out[: len(times)] = times
    return out


class _RoundRows:
    """One round's rows as arrays, filled from its pairs' results."""

    def __init__(self, pair: np.ndarray, trials: int, directed: bool) -> None:
        n = len(pair)
        self.pair, self.directed = pair, directed
        self.trial = np.full((n, trials), np.nan)
        self.iterations = np.zeros(n, dtype=np.int64)
        self.moved = np.zeros(n, dtype=np.int64)
        self.waits = np.full((n, trials, 2), np.nan)
        self.cond = np.full((n, 2, len(COND_DATASETS)), np.nan)
        self.elapsed = np.full(n, np.nan)
        self.looped = np.zeros(n)
        self._row = {(int(i), int(j)): k for k, (i, j) in enumerate(pair.tolist())}

    def row_of(self, res: PairResult) -> int:
        """The row of a result: (i, j) as scheduled, or (j, i) for a pair measured both ways at once."""
        k = self._row.get((res.i, res.j))
        if k is None and not self.directed:
            k = self._row.get((res.j, res.i))
        if k is None:
            raise ValueError(f"pair ({res.i}, {res.j}) is not in this round of the schedule")
        return k

    def pair_window(self) -> np.ndarray:
        """Each row's pair window: the later of its pair's transmitters' ends (NaN when not known)."""
        return np.fmax(self.elapsed, self.elapsed[partner_rows(len(self.pair), self.directed)])


def partner_rows(rows: int, directed: bool) -> np.ndarray:
    """Each row's partner: the other direction of its pair ((i, j) then (j, i): rows 2k and 2k + 1),
    itself when the pair was measured both ways at once."""
    return np.arange(rows) ^ 1 if directed else np.arange(rows)


def pair_looped(looped: np.ndarray, directed: bool) -> np.ndarray:
    """Each row's pair's trials' loop time: both directions' when measured apart."""
    return looped + looped[partner_rows(len(looped), True)] if directed else looped


class MapWriter(RunWriter):
    """A run file with the /map group; `store_round` writes one round of one size and flushes."""

    def __init__(self, path, attrs: dict, layout_rows: dict, trials: int, map_spec: dict, **kwargs) -> None:
        """As RunWriter, with /map created (`map_spec`: the keywords of `_create_map`) before the file
        is named, so a map file never lacks its group."""
        self._map_spec = map_spec
        self._cond_text = ""  # the last text written to /map/COND_TEXT, and when
        self._cond_written = -math.inf
        sizes = np.asarray(map_spec["sizes"], dtype=np.int64)
        n = len(map_spec["hosts"])
        self.map_sizes = sizes
        self.rounds_completed = 0
        self._best = np.full((len(sizes), n, n), np.nan)  # each pair's best one-way time, for the console
        self._pair_s = np.full((len(sizes), n, n), np.nan)  # each pair's own window, for the confirmations
        self._trials_s = np.zeros((len(sizes), n, n))  # of which its trials' loops (both directions)
        super().__init__(path, attrs, layout_rows, trials, **kwargs)

    def _create(self, attrs, layout_rows, trials) -> None:
        super()._create(attrs, layout_rows, trials)
        self._file.attrs["format_version"] = f"{MAP_FORMAT_VERSION[0]}.{MAP_FORMAT_VERSION[1]}"
        self._create_map(**self._map_spec)
        self._flush()

    def _create_map(self, attrs, hosts, ranks, sizes, n_rounds, rounds=None, rounds_matrix=None) -> None:
        """/map with its rows (`rounds`: the schedule's pairs per round; or, without them, the
        rounds of `rounds_matrix`, [N, N])."""
        import h5py

        s, t = len(sizes), self.trials
        if rounds is None:
            rounds = rounds_of_matrix(rounds_matrix, n_rounds)
        self._directed = str(attrs.get("directions", "")) == "both"
        pair, first = row_index(rounds, self._directed)
        self._pair, self._first = pair, first
        g = self._file.create_group(MAP_GROUP)
        for key, value in {
            **attrs,
            "n_rounds": n_rounds,
            "trials": t,
            "rounds_completed": 0,
            LAYOUT_ATTR: ROWS_LAYOUT,
        }.items():
            g.attrs[key] = value
        g.attrs["status"] = "running"
        ds = g.create_dataset("hosts", data=np.array(hosts, dtype=object), dtype=h5py.string_dtype())
        ds.attrs[TEXT_CHECKSUM] = text_crc32(hosts)
        g.create_dataset("ranks", data=np.asarray(ranks, dtype=np.int32), **CHECKSUM)
        g.create_dataset("size_bytes", data=np.asarray(sizes, dtype=np.int64), **CHECKSUM)
        g.create_dataset(PAIR, data=pair, **CHECKSUM)
        g.create_dataset(ROUND_FIRST_ROW, data=first, **CHECKSUM)
        rows = max(1, len(pair))
        per_round = int(np.max(np.diff(first))) if len(first) > 1 else 1
        for name, tail, dtype, fill, packed in row_datasets(t):
            c = chunk_rows(tail, np.dtype(dtype).itemsize, per_round, rows)
            extra = {"compression": "gzip", "compression_opts": 1, "shuffle": True} if packed else {}
            ds = g.create_dataset(
                name, (s, len(pair), *tail), dtype, chunks=(1, c, *tail), fillvalue=fill, **extra, **CHECKSUM
            )
            if name.startswith(COND_PREFIX):
                ds.attrs["sides"] = list(COND_SIDES)
        for name in ("window_start_unix_s", "window_end_unix_s"):
            g.create_dataset(name, (s, n_rounds), np.float64, fillvalue=np.nan, **CHECKSUM)
        self._pending_bytes += 8 * (s * n_rounds * 2 + 2 * len(pair) + len(first))

    def store_round(
        self, size_index: int, round_index: int, window: tuple[float, float], results: list[PairResult]
    ) -> None:
        """One round of one size: each pair's row (times, iterations, bytes, window, waits,
        conditions), the round's window; then `rounds_completed` and a flush."""
        with self._checked(f"writing round {round_index} of {int(self.map_sizes[size_index])} B"):
            self._store_round(size_index, round_index, window, results)
            self._flush()
        self.rounds_completed += 1

    def _store_round(self, s: int, r: int, window, results: list[PairResult]) -> None:
        from npmpi.core.modes import mode_factors

        g = self._h(MAP_GROUP)
        f = mode_factors(str(g.attrs["mode"]), int(g.attrs["window"]))
        size, t = int(self.map_sizes[s]), self.trials
        a, b = int(self._first[r]), int(self._first[r + 1])
        rows = _RoundRows(self._pair[a:b], t, self._directed)
        for res in results:
            k = rows.row_of(res)
            one_way, times = _one_way(res, f, t)
            rows.trial[k] = one_way
            rows.iterations[k] = res.iterations
            rows.moved[k] = (
                f.bytes_per_iteration_factor
                * size
                * (res.untimed_iterations + res.iterations * int(np.sum(np.isfinite(times))))
            )
            rows.waits[k] = _waits(res, t)
            if res.cond is not None:
                rows.cond[k] = _cond(res)
            if np.isfinite(res.elapsed_s):  # the pair's window: the later of its transmitters' ends
                rows.elapsed[k] = res.elapsed_s
                rows.looped[k] = float(np.nansum(res.trial_s))
            self._merge_conditions([x for x in res.cond_info or [] if not x.get("no_trial")])
        with warnings_off():
            best = np.nanmin(rows.trial, axis=1)
        own = rows.pair_window()  # each pair's own window (`window` is the round's)
        self._keep_summaries(s, rows.pair, best, own, pair_looped(rows.looped, self._directed))
        self._write_rows(s, a, b, rows, own)
        self._write_condition_text(g)
        self._h("map/window_start_unix_s")[s, r] = window[0]
        self._h("map/window_end_unix_s")[s, r] = window[1]
        g.attrs["rounds_completed"] = self.rounds_completed + 1
        self._pending_bytes += (b - a) * 8 * (3 * t + 4 + 2 * len(COND_DATASETS))

    def _keep_summaries(self, s: int, pair: np.ndarray, best, window, looped) -> None:
        """Rank 0's [S, N, N] figures of these rows' pairs at size s: best one-way time (each
        direction's own when measured apart), the pair's own window and its loops' time."""
        i, j = pair[:, 0], pair[:, 1]
        self._best[s, i, j] = best
        for x, y in ((i, j), (j, i)):
            if not self._directed:
                self._best[s, x, y] = best
            self._pair_s[s, x, y] = window
            self._trials_s[s, x, y] = looped

    def _write_rows(self, s: int, a: int, b: int, rows: _RoundRows, window: np.ndarray) -> None:
        """The round's rows a..b of size s into each per-pair dataset, one write each."""
        if a == b:
            return
        self._h("map/trial_s")[s, a:b] = rows.trial
        self._h("map/iterations")[s, a:b] = rows.iterations
        self._h("map/bytes_moved")[s, a:b] = rows.moved
        self._h("map/pair_window_s")[s, a:b] = window
        self._h("map/runq_wait_s")[s, a:b] = rows.waits
        for k, name in enumerate(COND_DATASETS):
            self._h(f"map/{COND_PREFIX}{name}")[s, a:b] = rows.cond[:, :, k]

    def _write_condition_text(self, g, final: bool = False) -> None:
        """/map/COND_TEXT: every rank's latest text (with its CRC-32), rewritten when it changed, at
        most every COND_TEXT_EVERY_S (each rewrite leaves the old text's bytes in the file) and at
        the end (`final`)."""
        import h5py

        if not self._conditions or (not final and time.monotonic() - self._cond_written < COND_TEXT_EVERY_S):
            return
        text = json.dumps(self._conditions, default=str, sort_keys=True)
        if text == self._cond_text:
            return
        if COND_TEXT not in g:
            g.create_dataset(COND_TEXT, (), dtype=h5py.string_dtype())
        ds = g[COND_TEXT]
        ds[()] = text
        ds.attrs[TEXT_CHECKSUM] = text_crc32([text])
        self._cond_text, self._cond_written = text, time.monotonic()
        self._pending_bytes += 2 * len(text)

    def adopt_rows(self, old, done: int, n_rounds: int, first: np.ndarray, block: int) -> None:
        """The first `done` rounds (size 0's first) of another rows map's /map group `old` (the same
        map: npmpi/map/resume.py) copied into this one, `block` rows at a time, and kept in the
        summaries as if measured here; `rounds_completed` = `done`, then a flush."""
        from npmpi.core.modes import mode_factors

        with self._checked("copying the completed rounds of the map resumed"):
            g = self._h(MAP_GROUP)
            f = mode_factors(str(g.attrs["mode"]), int(g.attrs["window"]))
            for s in range(len(self.map_sizes)):
                r_end = min(max(done - s * n_rounds, 0), n_rounds)
                rows = int(first[r_end])
                for name, *_ in row_datasets(self.trials):
                    if name in old:
                        for a in range(0, rows, block):
                            self._h(f"map/{name}")[s, a : min(rows, a + block)] = old[name][
                                s, a : min(rows, a + block)
                            ]
                for name in ("window_start_unix_s", "window_end_unix_s"):
                    self._h(f"map/{name}")[s, :r_end] = old[name][s, :r_end]
                if rows:
                    self._adopt_summaries(s, rows, f.one_way_factor)
            g.attrs["rounds_completed"] = done
            self._flush()
        self.rounds_completed = done

    def _adopt_summaries(self, s: int, rows: int, one_way_factor: float) -> None:
        g = self._h(MAP_GROUP)
        trial = g["trial_s"][s, :rows]
        with warnings_off():
            best = np.nanmin(trial, axis=1)
        looped = np.nansum(trial, axis=1) * g["iterations"][s, :rows] * one_way_factor
        window = g["pair_window_s"][s, :rows]
        self._keep_summaries(s, self._pair[:rows], best, window, pair_looped(looped, self._directed))

    def adopt_conditions(self, ranks: dict) -> None:
        """The resumed map's ranks' condition text, kept as this map's until its ranks' own replace it."""
        self._conditions.setdefault("ranks", {}).update(
            {str(k): v for k, v in ranks.items() if isinstance(v, dict)}
        )

    def best_all(self) -> np.ndarray:
        """[S, N, N] each measured pair's best one-way time so far (NaN elsewhere)."""
        return self._best.copy()

    def _windows_s(self, size_index: int, trials: int | None) -> np.ndarray:
        """[N, N] each pair's own window at a size, or what it would be with `trials` trials: the
        window's part outside the trials (first contact, probe, warm-up) and `trials` of its trials'
        mean loop time (NaN where not known)."""
        window, looped = self._pair_s[size_index], self._trials_s[size_index]
        if trials is None:
            return window
        return np.fmax(window - looped, 0.0) + looped * (trials / self.trials)

    def pair_seconds(self, size_index: int, i: int, j: int, trials: int | None = None) -> float:
        """Pair i, j's own window at a size, with `trials` trials when given (0 when not known)."""
        v = float(self._windows_s(size_index, trials)[i, j])
        return v if np.isfinite(v) else 0.0

    def median_pair_seconds(self, size_index: int, trials: int | None = None) -> float:
        """The median pair's own window at a size, with `trials` trials when given (0 when none is
        known)."""
        windows = self._windows_s(size_index, trials)
        known = windows[np.isfinite(windows)]
        return float(np.median(known)) if known.size else 0.0

    def store_confirmations(
        self, rows, repeats: int, budget: float, suspects: int, skipped: int, **facts
    ) -> None:
        """The suspects measured again (npmpi/map/confirm.py): rows of (size index, (start, end),
        [PairResult], role: 0 suspect, 1 reference), K results in all, into /map/confirm_*, with the
        re-measurement's facts as /map's attributes (`facts`: confirm_<key>); a flush."""
        from npmpi.core.modes import mode_factors

        with self._checked("writing the suspects measured again"):
            g = self._h(MAP_GROUP)
            f = mode_factors(str(g.attrs["mode"]), int(g.attrs["window"]))
            flat = [(s, w, res) for s, w, results, _ in rows for res in results]
            role = [r for _, _, results, r in rows for _ in results]
            role = np.array(role, dtype=np.int8)
            g.create_dataset("confirm_role", data=role, **checksum(role))
            k, t = len(flat), self.trials
            pair = np.array([(r.i, r.j) for _, _, r in flat], dtype=np.int32).reshape(k, 2)
            g.create_dataset("confirm_pair", data=pair, **checksum(pair))
            index = np.array([s for s, _, _ in flat], dtype=np.int32)
            g.create_dataset("confirm_size_index", data=index, **checksum(index))
            trial = np.array([_one_way(r, f, t)[0] for _, _, r in flat], dtype=np.float64).reshape(k, t)
            g.create_dataset("confirm_trial_s", data=trial, **checksum(trial))
            loop = np.array([_loop_s(r, t) for _, _, r in flat], dtype=np.float64).reshape(k, t)
            g.create_dataset("confirm_trial_elapsed_s", data=loop, **checksum(loop))
            waits = np.array([_waits(r, t) for _, _, r in flat], dtype=np.float64).reshape(k, t, 2)
            g.create_dataset("confirm_runq_wait_s", data=waits, **checksum(waits))
            cond = np.array([_cond(r) for _, _, r in flat], dtype=np.float64).reshape(
                k, 2, len(COND_DATASETS)
            )
            for c, name in enumerate(COND_DATASETS):
                ds = g.create_dataset(f"confirm_{COND_PREFIX}{name}", data=cond[:, :, c], **checksum(cond))
                ds.attrs["sides"] = list(COND_SIDES)
            for name, col in (("confirm_window_start_unix_s", 0), ("confirm_window_end_unix_s", 1)):
                edge = np.array([w[col] for _, w, _ in flat], dtype=np.float64)
                g.create_dataset(name, data=edge, **checksum(edge))
            for key, value in {
                "confirm_repeats": repeats,
                "confirm_budget": budget,
                "confirm_suspects": suspects,
                "confirm_skipped": skipped,
                **{f"confirm_{key}": value for key, value in facts.items()},
            }.items():
                g.attrs[key] = value
            self._pending_bytes += 8 * k * (4 * t + 5 + 2 * len(COND_DATASETS))
            self._flush()

    def best_one_way(self, size_index: int) -> np.ndarray:
        """[N, N] each measured pair's best one-way time at a size so far (NaN elsewhere)."""
        return self._best[size_index]

    def bandwidth_row(self, size_index: int) -> np.ndarray:
        """[N, N] 8 * size / best one-way time at a size so far (NaN elsewhere)."""
        return 8.0 * float(self.map_sizes[size_index]) / self._best[size_index]

    def set_map_status(self, status: str) -> None:
        """/map's status (as the root's): running, complete, interrupted or failed."""
        self.set_group_attrs(MAP_GROUP, status=status)
        self.flush()

    def finish(self, status: str, message: str = "", **attrs) -> None:
        """Close the file as RunWriter.finish does, with /map's status set first. After a write error
        (a full disk) /map is `failed` as the root is, and its `rounds_completed` the rounds whose
        flush succeeded (the failed round's may have reached HDF5's cache before the flush failed)."""
        if self._error is None and self._res.fd >= 0 and MAP_GROUP in self._file:
            with contextlib.suppress(RunFileWriteError), self._checked("writing the ranks' conditions"):
                self._write_condition_text(self._file[MAP_GROUP], final=True)
            with contextlib.suppress(RunFileWriteError):
                self.set_group_attrs(MAP_GROUP, status=status, status_message=message)
        if self._error is not None and self._res.fd >= 0:
            with contextlib.suppress(Exception):  # written by the salvage's flush, once space is freed
                g = self._file[MAP_GROUP]
                g.attrs["status"] = "failed"
                g.attrs["rounds_completed"] = self.rounds_completed
        super().finish(status, message, **attrs)
