"""A run's model (numbers/model.py) as plain JSON-able values and as table rows: the names of the JSON's
`model`, the model CSV's columns and the API's `run.model` (docs/analysis.md, "Models")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from npmpi_analysis.numbers.model import DEFAULT_RESAMPLES, DEFAULT_SEED, ModelError, Param, RunModel


@dataclass
class ModelOptions:
    """How the analysis fits its models: the user's breaks (bytes; None: found in the data), the
    bootstrap's resamples and seed."""

    breaks_bytes: list[int] | None = None
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED


def fitted(a, options: ModelOptions | None) -> tuple[RunModel | None, str, bool]:
    """(the model of analysed run `a`, why there is none, whether that is the user's input's fault)."""
    from npmpi_analysis.numbers.model_energy import fit_model

    options = options or ModelOptions()
    try:
        return fit_model(a, options.breaks_bytes, options.resamples, options.seed), "", False
    except ModelError as exc:
        return None, str(exc), bool(options.breaks_bytes)


def _f(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def below_resolution(p: Param | None) -> bool:
    """A dynamic figure whose interval reaches zero: the run cannot tell it from zero."""
    return p is not None and not (p.lo > 0)


def regime_rows(model: RunModel) -> list[dict[str, Any]]:
    """One dict per regime: sizes, alpha, beta, the energy and dynamic energy of one message and per
    bit, each with its 95 % interval (`_lo`, `_hi`), the fits' R² and largest relative residual."""
    rows = []
    for r in model.regimes:
        row: dict[str, Any] = {
            "size_lo_bytes": r.size_lo_bytes,
            "size_hi_bytes": r.size_hi_bytes,
            "sizes": r.sizes,
        }
        for key, p in (("alpha_s", r.alpha_s), ("beta_bit_s", r.beta_bit_s)):
            row[key], row[key + "_lo"], row[key + "_hi"] = _f(p.value), _f(p.lo), _f(p.hi)
        row["r2"], row["max_residual"] = _f(r.r2), _f(r.max_residual)
        for prefix, fit in (("", r.energy), ("dynamic_", r.dynamic)):
            pairs = (
                ("energy_per_message_j", fit and fit.per_message_j),
                ("energy_per_bit_j", fit and fit.per_bit_j),
            )
            for key, p in pairs:
                name = prefix + key
                row[name] = _f(p.value) if p else None
                row[name + "_lo"] = _f(p.lo) if p else None
                row[name + "_hi"] = _f(p.hi) if p else None
            row[prefix + "energy_r2"] = _f(fit.r2) if fit else None
            row[prefix + "energy_max_residual"] = _f(fit.max_residual) if fit else None
            row[prefix + "energy_sizes"] = fit.sizes if fit else 0
        row["dynamic_per_message_below_resolution"] = below_resolution(r.dynamic and r.dynamic.per_message_j)
        row["dynamic_per_bit_below_resolution"] = below_resolution(r.dynamic and r.dynamic.per_bit_j)
        rows.append(row)
    return rows


def summary(model: RunModel | None, note: str) -> dict[str, Any]:
    """The JSON's `model` of one run (or why there is none)."""
    if model is None:
        return {"regimes": [], "note": note}
    out: dict[str, Any] = {
        "regimes": regime_rows(model),
        "breaks_bytes": list(model.breaks_bytes),
        "breaks_source": model.breaks_source,
        "confidence_level": 0.95,
        "bootstrap_resamples": model.resamples,
        "bootstrap_seed": model.seed,
        "energy_left_out_sizes_bytes": list(model.energy_left_out),
        "note": note,
    }
    res = model.resolution
    if res is not None:
        out["resolution"] = resolution_summary(res)
    return out


def resolution_summary(res) -> dict[str, Any]:
    """What the meter resolves: the median over sizes of the smallest dynamic power told from zero,
    the readings' spread, the meter's period, and the window each size needs for 1 W and 10 W."""
    import numpy as np

    finite = res.power_w[np.isfinite(res.power_w)]
    out = {
        "dynamic_power_resolution_w_median": _f(np.median(finite)) if finite.size else None,
        "reading_sigma_w": _f(res.reading_sigma_w),
        "idle_mean_sigma_w": _f(res.idle_mean_sigma_w),
        "meter_period_s": _f(res.period_s),
        "trials_per_size": res.trials,
    }
    for watts in WINDOW_TARGETS_W:
        out[f"window_s_to_resolve_{watts:g}_w"] = _f(res.window_for(watts))
    return out


WINDOW_TARGETS_W = (1.0, 10.0)
