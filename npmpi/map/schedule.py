"""The map's schedules: which members measure each other in which round (pure, no MPI).

`rounds` is the circle method (round-robin tournament): member 0 stays put, the others rotate one
place per round, and position k meets position m-1-k. With N even that is N-1 rounds of N/2
disjoint pairs; with N odd a phantom member makes N+1 positions, so there are N rounds and whoever
meets the phantom has a bye. Every pair meets exactly once and no member is in two pairs of a round.
`serial` measures one pair per round, N(N-1)/2 rounds, in the order (0,1), (0,2) ... (N-2,N-1).

`sample_rounds` is `--pairs sample:K`, the daily check: the members shuffled by a seeded generator,
K rounds of their circle schedule (with switches known, each next round the one covering most
pairs of switches not covered yet, ties in the shuffled order), then make-up rounds, only where
needed: for each pair of switches still not covered (a switch with itself when it has two members),
and for each member with fewer than K partners (an odd N has a bye per round). Every member then
meets at least K distinct partners (exactly K with N even and no make-up round; a make-up round
gives some K + 1), every pair at most once, no member twice in a round; the seed reproduces it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SCHEDULE_ROUNDS = "rounds"
SCHEDULE_SERIAL = "serial"
SCHEDULES = (SCHEDULE_ROUNDS, SCHEDULE_SERIAL)

Round = list[tuple[int, int]]


class CircleRounds(Sequence):
    """The circle method's rounds for n members, each made when asked for (a list of pairs (i, j),
    i < j, in order): N - 1 rounds of N / 2 pairs are not held as N^2 / 2 tuples (a 4,096-member map's
    would take a gigabyte); `array()` gives them all as one [R, P, 2] array."""

    def __init__(self, n: int) -> None:
        if n < 2:
            raise ValueError(f"a map needs at least 2 members, {n} given")
        self.n, self.m = n, n if n % 2 == 0 else n + 1  # positions; member n is the phantom of an odd n

    def __len__(self) -> int:
        return self.m - 1

    def __getitem__(self, r):
        if isinstance(r, slice):
            return [self[k] for k in range(*r.indices(len(self)))]
        r = range(len(self))[r]  # an index out of range raises IndexError, a negative one counts back
        return [tuple(p) for p in self._pairs(np.array([r]))[0].tolist()]

    def __eq__(self, other) -> bool:
        return list(self) == list(other)

    def _pairs(self, r: np.ndarray) -> np.ndarray:
        """[len(r), P, 2] the pairs of rounds r, each round's sorted."""
        m, k = self.m, np.arange(self.m // 2)

        def at(pos: np.ndarray) -> np.ndarray:  # the member at each position in round r
            return np.where(pos == 0, 0, 1 + (pos[None, :] - 1 + r[:, None]) % (m - 1))

        a, b = at(k), at(m - 1 - k)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        keep = hi < self.n  # the phantom's pair is a bye
        per = int(keep[0].sum())
        lo, hi = lo[keep].reshape(len(r), per), hi[keep].reshape(len(r), per)
        order = np.argsort(lo, axis=1, kind="stable")  # (lo, hi) sorted: each lo is in one pair
        return np.stack([np.take_along_axis(lo, order, 1), np.take_along_axis(hi, order, 1)], -1)

    def array(self) -> np.ndarray:
        """[R, P, 2] int32 every round's pairs (P = N // 2)."""
        return self._pairs(np.arange(len(self))).astype(np.int32)

    def lengths(self) -> np.ndarray:
        return np.full(len(self), self.n // 2, dtype=np.int64)


def circle_rounds(n: int) -> CircleRounds:
    """The circle method's rounds for n members: each a list of pairs (i, j), i < j."""
    return CircleRounds(n)


def round_lengths(rounds) -> np.ndarray:
    """The pairs in each round."""
    if hasattr(rounds, "lengths"):
        return rounds.lengths()
    return np.array([len(r) for r in rounds], dtype=np.int64)


def serial_rounds(n: int) -> list[Round]:
    """One pair per round, every pair once."""
    if n < 2:
        raise ValueError(f"a map needs at least 2 members, {n} given")
    return [[(i, j)] for i in range(n) for j in range(i + 1, n)]


def make_rounds(schedule: str, n: int) -> list[Round]:
    """The rounds of a schedule by name (SCHEDULES)."""
    if schedule == SCHEDULE_ROUNDS:
        return circle_rounds(n)
    if schedule == SCHEDULE_SERIAL:
        return serial_rounds(n)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of: {', '.join(SCHEDULES)}")


def map_rounds(mopts, n: int, hosts: list[str] | None = None) -> list[Round]:
    """A map's rounds by its options (npmpi/map/options.py MapOptions): the schedule's, or with
    --pairs sample:K the sample's (each member's switch from --topology by `hosts`, the members'
    hosts; with --schedule serial one of its pairs per round)."""
    if not mopts.sample_k:
        return make_rounds(mopts.schedule, n)
    switches = None
    if mopts.topology and hosts is not None:
        switch_of = dict(mopts.topology)
        ids = {w: i for i, w in enumerate(sorted({switch_of[h] for h in hosts}))}
        switches = [ids[switch_of[h]] for h in hosts]
    rounds = sample_rounds(n, mopts.sample_k, mopts.sample_seed, switches)
    if mopts.schedule == SCHEDULE_SERIAL:
        return [[p] for r in rounds for p in r]
    return rounds


def switch_pairs(switches: list[int]) -> set[tuple[int, int]]:
    """The pairs of switches (s <= t) a sample must cover: every two distinct switches, and a switch
    with itself when it has two members or more."""
    count: dict[int, int] = {}
    for w in switches:
        count[w] = count.get(w, 0) + 1
    ids = sorted(count)
    return {(s, t) for s in ids for t in ids if s < t or (s == t and count[s] > 1)}


def _covers(pairs: Round, switches: list[int]) -> set[tuple[int, int]]:
    return {(min(switches[i], switches[j]), max(switches[i], switches[j])) for i, j in pairs}


def sample_rounds(n: int, k: int, seed: int, switches: list[int] | None = None) -> list[Round]:
    """`--pairs sample:K`'s rounds (module docstring); `switches`: each member's switch (an int), or None."""
    if n < 2:
        raise ValueError(f"a map needs at least 2 members, {n} given")
    if not 1 <= k <= n - 1:
        raise ValueError(f"a sample of {k} partners per member needs 1 to {n - 1} (the members - 1)")
    rng = np.random.default_rng(seed)
    order = [int(m) for m in rng.permutation(n)]  # position -> member
    circle = circle_rounds(n)
    if k == n - 1:
        return [_renamed(r, order) for r in circle]  # every pair: the full map in a shuffled order
    left = [int(r) for r in rng.permutation(len(circle))]
    need = switch_pairs(switches) if switches is not None else set()
    covered: set[tuple[int, int]] = set()
    rounds = []
    # with switches every round's cover is weighed (all N - 1 rounds made); without, only the K taken
    full = [_renamed(r, order) for r in circle] if switches is not None else None
    covers = [_covers(r, switches) for r in full] if full is not None else []
    for _ in range(k):
        pick = left[0]
        if need - covered:
            missing = need - covered
            pick = max(left, key=lambda r: len(covers[r] & missing))
        left.remove(pick)
        rounds.append(full[pick] if full is not None else _renamed(circle[pick], order))
        if switches is not None:
            covered |= covers[pick]
    met: list[set[int]] = [set() for _ in range(n)]
    for pairs in rounds:
        for i, j in pairs:
            met[i].add(j)
            met[j].add(i)
    return rounds + _make_up(n, k, met, order, switches, need - covered)


def _renamed(pairs: Round, order: list[int]) -> Round:
    return sorted((min(order[i], order[j]), max(order[i], order[j])) for i, j in pairs)


def _take(pairs: Round, busy: set[int], met: list[set[int]], i: int, j: int) -> None:
    pairs.append((min(i, j), max(i, j)))
    busy.update((i, j))
    met[i].add(j)
    met[j].add(i)


def _make_up(
    n: int, k: int, met: list[set[int]], order: list[int], switches, missing: set[tuple[int, int]]
) -> list[Round]:
    """Rounds of pairs not met yet, until every pair of switches is covered and every member has k
    partners; each round's pairs chosen greedily (the members with fewest partners first)."""
    out: list[Round] = []
    members_of: dict[int, list[int]] = {}
    for m in order:
        if switches is not None:
            members_of.setdefault(switches[m], []).append(m)
    while True:
        busy: set[int] = set()
        pairs: Round = []
        for s, t in sorted(missing):
            free = [
                (len(met[i]) + len(met[j]), i, j)
                for i in members_of[s]
                for j in members_of[t]
                if i != j and j not in met[i] and not busy & {i, j}
            ]
            if free:
                _, i, j = min(free)
                _take(pairs, busy, met, i, j)
                missing.discard((s, t))
        for i in sorted(order, key=lambda m: len(met[m])):
            if len(met[i]) >= k or i in busy:
                continue
            free = [j for j in order if j != i and j not in met[i] and j not in busy]
            if free:
                _take(pairs, busy, met, i, min(free, key=lambda j: (len(met[j]) >= k, len(met[j]))))
        if not pairs:
            return out
        out.append(sorted(pairs))


def round_matrix(rounds: list[Round], n: int) -> np.ndarray:
    """[n, n] int32: the round in which i and j meet (symmetric), -1 on the diagonal."""
    out = np.full((n, n), -1, dtype=np.int32)
    for r, pairs in enumerate(rounds):
        for i, j in pairs:
            out[i, j] = out[j, i] = r
    return out
