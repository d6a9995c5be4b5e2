"""The words of a map's outliers, for the text summary and the HTML report: the confirmed ones, those
the map could not measure again within its budget (neither healthy nor confirmed), and those not
confirmed, each with why (npmpi_analysis/numbers/map_confirmed.py)."""

from __future__ import annotations

import math

from npmpi_analysis.html_parts import html_text as _e
from npmpi_analysis.numbers.map_outliers import THRESHOLD_TEXT


def outlier_lines(a) -> list[str]:
    """'outliers (rule): ' then one sentence a line, or 'none named'; with a second measurement
    (/map/confirm_*), only the confirmed ones, then those not measured again (the budget) and the
    others not confirmed, each with why."""
    from npmpi_analysis.numbers.map_confirmed import confirm_summary

    facts = confirm_summary(a)
    if facts is None:
        out = [f"  outliers ({THRESHOLD_TEXT}):"]
        return out + ([f"    {f.sentence}" for f in a.outliers] or ["    none named"])
    out = [
        f"  outliers confirmed by measuring each suspect again, {confirm_words(facts)} ({THRESHOLD_TEXT}):"
    ]
    left_out = [f for f in a.outliers if not_measured(f)]
    out += [f"    {f.sentence}" for f in a.outliers if f.confirmed] or [
        "    none confirmed" if left_out else "    none named"
    ]
    out += [f"  not measured again: {f.sentence}; {not_measured_words(facts)}" for f in left_out]
    return out + [
        f"  not confirmed: {f.sentence}; {unconfirmed_words(f)}"
        for f in a.outliers
        if f.confirmed is False and not not_measured(f)
    ]


def confirm_words(facts: dict) -> str:
    """'one pair at a time, 4 times', with what the budget made smaller ('2 times of 1 trial (the
    budget: --confirm 4, the map's 7 trials)')."""
    words = f"one pair at a time, {facts['repeats']} times"
    fewer = []
    if facts["repeats"] < facts["repeats_asked"]:
        fewer.append(f"--confirm {facts['repeats_asked']}")
    if 0 < facts["trials"] < facts["map_trials"]:
        words += f" of {facts['trials']} trial(s)"
        fewer.append(f"the map's {facts['map_trials']} trials")
    return words + (f" (made smaller for the budget: {', '.join(fewer)})" if fewer else "")


def not_measured(f) -> bool:
    """A finding the map could not measure again within its budget: neither healthy nor confirmed."""
    from npmpi_analysis.numbers.map_confirmed import REASON_NOT_MEASURED

    return f.confirmed is False and f.confirm_reason == REASON_NOT_MEASURED


def not_measured_words(facts: dict | None) -> str:
    """Why a finding was not measured again, and the budget that would have measured it."""
    budget = (facts or {}).get("budget", math.nan)
    needed = (facts or {}).get("needed_budget", math.nan)
    words = "the map's --confirm-budget"
    if math.isfinite(budget):
        words += f" {budget:g}"
    if math.isfinite(needed):
        return (
            f"named by the map alone, not confirmed nor refuted: {words} did not pay for it "
            f"(--confirm-budget {needed:g} would have measured the most severe)"
        )
    return f"named by the map alone, not confirmed nor refuted: {words} did not pay for it"


def unconfirmed_words(f, facts: dict | None = None) -> str:
    """Why a finding measured again (or not) is not named."""
    from npmpi_analysis.numbers.map_confirmed import REASON_LATENCY_WAITED, REASON_SCATTER, REASON_SLOWEST

    if not_measured(f):
        return not_measured_words(facts)
    if f.confirm_reason == REASON_LATENCY_WAITED:
        return (
            f"waited {100 * f.confirm_wait_fraction:.0f} % of its trials for a CPU when measured again "
            "(never measured free of it: a 1-byte round trip whose ranks wait measures the scheduler, not "
            "the link)"
        )
    if f.confirm_reason == REASON_SLOWEST:
        return (
            f"measured again: {f.confirm_ratio:.2f}x the reference links measured with it, but "
            f"{f.confirm_slowest_ratio:.2f}x their slowest window (a healthy link read as slowly there)"
        )
    if f.confirm_reason == REASON_SCATTER and f.confirm_scatter is not None:
        low, high = f.confirm_scatter
        return (
            f"measured again its trials scattered {low * 1e6:.0f}-{high * 1e6:.0f} us, as when the ranks "
            "wait for a CPU (a slow link's delay is steady)"
        )
    if math.isfinite(f.confirm_ratio):
        return f"measured again: {f.confirm_ratio:.2f}x the reference links measured with it"
    return not_measured_words(facts)


def outlier_items(a) -> list[str]:
    """The report's outliers: named (confirmed, or without a second measurement), then those not
    measured again (the budget), then those not confirmed."""
    from npmpi_analysis.numbers.map_confirmed import confirm_summary

    facts = confirm_summary(a)
    left_out = [f for f in a.outliers if not_measured(f)]
    parts = [f"<li>{_e(f.sentence)}</li>" for f in a.outliers if f.confirmed is not False] or [
        "<li>none confirmed</li>" if left_out else "<li>none named</li>"
    ]
    parts += [
        f"<li>not measured again: {_e(f.sentence)}; {_e(not_measured_words(facts))}</li>" for f in left_out
    ]
    return parts + [
        f"<li>not confirmed: {_e(f.sentence)}; {_e(unconfirmed_words(f, facts))}</li>"
        for f in a.outliers
        if f.confirmed is False and not not_measured(f)
    ]
