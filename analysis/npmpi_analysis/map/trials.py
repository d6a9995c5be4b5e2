"""Each pair's trials summed up per size: how many ran, how many stalled, the best, the mean and
the σ of the mean one-way time, and their total (for the conditions' bounds).

A dense map (format 1.x) is summed up from its [S, N, N, T] matrix, each pair's trials taken from
(i, j) or, where not finite, from (j, i) (`symmetric`). A rows map (format 2.0) measured one way per
pair is summed up block by block from its [S, P, T] rows as they are read (rows.read_trial_rows):
the analysis never holds every trial (at 4,096 nodes, 2 sizes and 7 trials they would be 1.9 GB,
and 9 GB with the copies the summary of a dense matrix makes). A row stands for both (i, j) and
(j, i), as the dense matrix a writer of format 1.x stored, so both ways give the same numbers.

A trial is stalled (a member stopped, swapped out or preempted) when it took over STALL_RATIO times
the pair's best trial and at least STALL_MIN_S more loop time: it is flagged and left out of the
mean and its σ (issue 28); the best trial is unaffected.
"""

from __future__ import annotations

import numpy as np

from npmpi_analysis.numbers import compute

STALL_RATIO = 10.0
STALL_MIN_S = 0.5

# each summary's value for a pair without a row (never measured)
FILLS = {
    "trials_run": 0,
    "trials_stalled": 0,
    "best_s": np.nan,
    "mean_s": np.nan,
    "sigma_s": np.nan,
    "sum_s": 0.0,
}


def summarise(trials: np.ndarray, iterations: np.ndarray) -> dict[str, np.ndarray]:
    """The summaries (FILLS' names) of K pairs' trials [K, T] (NaN: not run), each pair measured
    with `iterations` [K] iterations per trial."""
    trials = np.ascontiguousarray(trials, dtype=np.float64)
    finite = np.isfinite(trials)
    runs = finite.sum(axis=1)
    with np.errstate(all="ignore"):
        total = np.nansum(np.where(trials > 0, trials, np.nan), axis=-1)
        best = np.where(runs > 0, np.min(np.where(finite, trials, np.inf), axis=1), np.nan)
        # a trial's loop time is at least its one-way time x iterations (the mode's divisor is >= 1)
        stalled = finite & (trials > STALL_RATIO * best[:, None])
        stalled &= (trials - best[:, None]) * np.asarray(iterations, dtype=float)[:, None] >= STALL_MIN_S
        kept_trials = np.where(stalled, np.nan, trials)
        kept = runs - stalled.sum(axis=1)
        mean = np.where(
            kept > 0,
            np.where(np.isfinite(kept_trials), kept_trials, 0.0).sum(axis=1) / np.maximum(kept, 1),
            np.nan,
        )
        sigma = np.where(kept > 0, compute.sigma_of_mean(kept_trials), np.nan)
    return {
        "trials_run": runs,
        "trials_stalled": stalled.sum(axis=1),
        "best_s": best,
        "mean_s": mean,
        "sigma_s": sigma,
        "sum_s": total,
    }


def symmetric(x: np.ndarray) -> np.ndarray:
    """x [..., N, N(, T)] with each pair's value taken from (i, j), or from (j, i) where (i, j) is
    not finite: the writer stores both; a reader must not depend on it."""
    swapped = np.swapaxes(x, 1, 2) if x.ndim == 4 else np.swapaxes(x, -1, -2)
    return np.where(np.isfinite(x), x, swapped)


def dense_summaries(trial_s: np.ndarray, iterations: np.ndarray) -> dict[str, np.ndarray]:
    """The summaries [S, N, N] of a dense map's trials [S, N, N, T] (the diagonal never a pair),
    but `sum_s`: each cell's own trials' total (conditions' bounds), as stored."""
    s, n, _, t = trial_s.shape
    both = symmetric(trial_s)
    for k in range(n):
        both[:, k, k, :] = np.nan
    its = np.maximum(iterations, np.swapaxes(iterations, 1, 2)).reshape(-1)
    out = {k: v.reshape(s, n, n) for k, v in summarise(both.reshape(s * n * n, t), its).items()}
    with np.errstate(invalid="ignore"):
        out["sum_s"] = np.nansum(np.where(trial_s > 0, trial_s, np.nan), axis=-1)
    return out


def leave_out(summaries: dict[str, np.ndarray], where: np.ndarray) -> None:
    """Make the pairs and sizes `where` [S, N, N] unmeasured (a round the map did not count)."""
    for name, x in summaries.items():
        if hasattr(x, "blank"):  # kept as rows (map/pairmatrix.PairMatrix)
            summaries[name] = x.blank(where)
        else:
            x[where] = FILLS[name]
