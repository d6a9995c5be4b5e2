"""How a collective's model grows with the rank count: per op measured at several rank counts, the
alpha of its first regime (the smallest messages) and the beta of its last (the largest) fitted
against log2 n and against n, the better named with its R² (docs/analysis.md, "Models")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from npmpi_analysis.coll.numbers import coll_ranks

LAWS = ("log2 n", "n")


def _line(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """y = intercept + slope x by least squares, and its R² (NaN with fewer than two points)."""
    if len(x) < 2 or np.ptp(x) == 0:
        return {"intercept": math.nan, "slope": math.nan, "r2": math.nan}
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    tss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / tss if tss > 0 else 1.0
    return {"intercept": float(intercept), "slope": float(slope), "r2": r2}


def _fits(n: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    ok = np.isfinite(y)
    n, y = n[ok], y[ok]
    out: dict[str, Any] = {law: _line(np.log2(n) if law == "log2 n" else n, y) for law in LAWS}
    r2 = {law: out[law]["r2"] for law in LAWS}
    if len(n) < 3:  # two points: both lines pass through them
        out["better"] = ""
        out["why"] = f"{len(n)} rank count(s): three or more tell log2 n from n"
    else:
        better = max(LAWS, key=lambda law: r2[law] if math.isfinite(r2[law]) else -math.inf)
        out["better"] = better
        out["why"] = f"R² {r2[better]:.4f} against {r2[LAWS[1 - LAWS.index(better)]]:.4f}"
    out["points"] = len(n)
    return out


def scaling(analyses) -> list[dict[str, Any]]:
    """One dict per collective op measured at two rank counts or more: the rank counts, alpha and
    beta at each, and their fits against log2 n and n."""
    by_op: dict[str, list] = {}
    for a in analyses:
        op = a.attrs.get("coll_op")
        if a.model is not None and isinstance(op, str) and coll_ranks(a.attrs) >= 1:
            by_op.setdefault(op, []).append(a)
    out = []
    for op, runs in by_op.items():
        runs = sorted(runs, key=lambda a: coll_ranks(a.attrs))
        n = np.array([coll_ranks(a.attrs) for a in runs], dtype=float)
        if len(set(n)) < 2:
            continue
        alpha = np.array([a.model.regimes[0].alpha_s.value for a in runs])
        beta = np.array([a.model.regimes[-1].beta_bit_s.value for a in runs])
        beta = np.where(np.isfinite(beta), beta, np.nan)
        out.append(
            {
                "op": op,
                "ranks": [int(k) for k in n],
                "alpha_s": [float(x) for x in alpha],
                "beta_bit_s": [float(x) if math.isfinite(x) else None for x in beta],
                "alpha_fit": _fits(n, alpha),
                "beta_fit": _fits(n, beta),
            }
        )
    return out


def lines(rows: list[dict[str, Any]]) -> list[str]:
    """The console's lines: per op, alpha's and beta's growth with the rank count."""
    out = []
    for r in rows:
        ranks = ", ".join(str(k) for k in r["ranks"])
        for name, key, unit, scale in (
            ("alpha", "alpha_fit", "us", 1e6),
            ("beta", "beta_fit", "Gbit/s", 1e-9),
        ):
            f = r[key]
            if f["better"]:
                law = f[f["better"]]
                text = (
                    f"= {law['intercept'] * scale:.4g} {'-' if law['slope'] < 0 else '+'} "
                    f"{abs(law['slope']) * scale:.4g} x {f['better']} "
                    f"{unit} (fits {f['better']} better: {f['why']})"
                )
            else:
                text = f"not told apart ({f['why']})"
            out.append(f"  {r['op']} at {ranks} ranks: {name} {text}")
    return out
