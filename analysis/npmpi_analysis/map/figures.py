"""Heatmaps of a cluster map: latency, bandwidth per size, energy per bit per size (with power), and
the ratio after / before of two maps. Named outliers are boxed in red; estimated or simulated power
is labelled on every figure that shows it, as the sweep's figures do.
"""

from __future__ import annotations

import numpy as np

from npmpi.core.units import format_size_bytes
from npmpi.core.units import format_size_iec as format_size
from npmpi.runfile.maprows import warnings_off
from npmpi_analysis.figures.render import Plot

CAVEAT_COLOR = "firebrick"
ANNOTATE_MAX = 16  # cells are labelled with their value up to this many hosts
RATIO_SPAN = 4.0  # colours run over 1/4x to 4x the map's median, logarithmic, whatever the map holds
WORSE_LOW, WORSE_HIGH = "low", "high"  # which way a quantity is worse: bandwidth low, latency high
MAX_TICK_LABELS = 32
MAX_CELLS = 256  # a heatmap of more hosts draws each cell as the worst of a block of links


def _figure(n: int):
    from matplotlib.figure import Figure

    side = min(max(4.5, 0.45 * n + 2.5), 14.0)
    fig = Figure(figsize=(side + 2.0, side))
    ax = fig.subplots()
    fig.subplots_adjust(left=0.14, right=0.86, bottom=0.14, top=0.85)
    return fig, ax


def tick_names(names: list[str]) -> tuple[list[str], str]:
    """The host names without the domain they all share (".cluster.example.org"), and that domain."""
    parts = [n.split(".", 1) for n in names]
    domains = {p[1] for p in parts if len(p) == 2}
    if len(names) < 2 or len(domains) != 1 or any(len(p) < 2 for p in parts):
        return list(names), ""
    return [p[0] for p in parts], "." + domains.pop()


def _fit_labels(fig, labels: list[str]) -> None:
    """Margins wide enough for the longest tick label (8 pt: about 0.07 inch a character)."""
    width, height = fig.get_size_inches()
    room = 0.3 + 0.07 * max((len(s) for s in labels), default=0)
    fig.subplots_adjust(left=min(max(0.14, room / width), 0.45), bottom=min(max(0.14, room / height), 0.45))


def heatmap(
    name: str,
    x: np.ndarray,
    names: list[str],
    title: str,
    unit: str,
    caption: str,
    caveat: str = "",
    boxes: list[tuple[int, ...]] | None = None,
    diverging: bool = False,
    worse: str = WORSE_LOW,
) -> Plot:
    """One [N, N] matrix as a heatmap (NaN blank), cells (i, j) in `boxes` outlined in red. The
    colours are each cell's ratio to the map's median on a fixed logarithmic scale (1/RATIO_SPAN to
    RATIO_SPAN), red where `worse` (WORSE_LOW or WORSE_HIGH) and blue where better, so a uniform map
    is uniformly pale; the cells hold the absolute values. `diverging`: x is already a ratio around
    1 (after / before), coloured on the same fixed scale."""
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FuncFormatter, NullFormatter

    finite = np.asarray(x, dtype=float)
    finite = finite[np.isfinite(finite) & (finite > 0)]
    median = 1.0 if diverging or not finite.size else float(np.median(finite))
    block = -(-len(names) // MAX_CELLS)  # a large map: each cell the worst of block x block links
    if block > 1:
        x, names, boxes = worst_blocks(np.asarray(x, dtype=float), names, boxes, block, worse)
        caption += (
            f" Each cell is the worst of up to {block} x {block} links (hosts in rank order, a cell's "
            "first host named): the CSV and JSON hold every link."
        )
        title = f"{title} ({block} x {block} links a cell)"
    n = len(names)
    fig, ax = _figure(n)
    data = np.ma.masked_invalid(np.asarray(x, dtype=float))
    ratio = np.ma.masked_invalid(np.where(np.asarray(x, dtype=float) > 0, x, np.nan) / median)
    norm = LogNorm(1.0 / RATIO_SPAN, RATIO_SPAN, clip=True)
    cmap = "RdBu" if worse == WORSE_LOW else "RdBu_r"
    image = ax.imshow(ratio, cmap=cmap, norm=norm, interpolation="nearest")
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_ticks([1 / RATIO_SPAN, 0.5, 1.0, 2.0, RATIO_SPAN])
    bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.2g}x"))  # 0.5x, not 5x10^-1
    bar.ax.yaxis.set_minor_formatter(NullFormatter())
    label = unit if diverging else f"ratio to the median, {_short(median)} {unit}; red: worse"
    bar.set_label(label if not caveat else f"{label} ({caveat.split(',')[0]})", fontsize=9)
    step = -(-n // MAX_TICK_LABELS)  # every host named up to MAX_TICK_LABELS, then every step-th
    ticks = list(range(0, n, step))
    short, domain = tick_names(names)
    ax.set_xticks(ticks, [short[k] for k in ticks], rotation=90, fontsize=8)
    ax.set_yticks(ticks, [short[k] for k in ticks], fontsize=8)
    _fit_labels(fig, [short[k] for k in ticks])
    if domain:
        ax.set_xlabel(f"hosts: NAME{domain}", fontsize=8)
    if n <= ANNOTATE_MAX and finite.size and block == 1:
        _annotate(ax, image, data, ratio)
    for box in boxes or []:  # (i, j): a link, both cells; (i, j, 1): one direction, its own cell
        i, j = box[0], box[1]
        for a, b in ((i, j),) if len(box) > 2 else ((i, j), (j, i)):
            ax.add_patch(Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, edgecolor="red", lw=2))
    ax.set_title(title, fontsize=10)
    if caveat:
        fig.text(
            0.5,
            0.995,
            f"Power is {caveat}",
            color=CAVEAT_COLOR,
            fontsize=9,
            fontweight="bold",
            ha="center",
            va="top",
        )
    return Plot(name, fig, caption, caveat)


def worst_blocks(x: np.ndarray, names: list[str], boxes, block: int, worse: str):
    """[N, N] as [M, M] cells of block x block (M = ceil(N / block)), each the worst of its finite
    values (the lowest when `worse` is WORSE_LOW, else the highest; NaN when none), each cell named
    by its first host, and the boxes moved to their cells (once each)."""
    n = len(names)
    m = -(-n // block)
    padded = np.full((m * block, m * block), np.nan)
    padded[:n, :n] = x
    cells = padded.reshape(m, block, m, block).transpose(0, 2, 1, 3).reshape(m, m, block * block)
    with np.errstate(invalid="ignore"), warnings_off():  # a cell of no measured link: NaN
        worst = np.nanmin(cells, axis=2) if worse == WORSE_LOW else np.nanmax(cells, axis=2)
    moved = sorted({(b[0] // block, b[1] // block, *b[2:]) for b in boxes or []})
    return worst, [names[k * block] for k in range(m)], moved


def _annotate(ax, image, data, ratio) -> None:
    """Each cell's absolute value, in white on dark colours and black on light ones."""
    shade = ratio.filled(np.nan)
    for (i, j), v in np.ndenumerate(data.filled(np.nan)):
        if np.isfinite(v):
            r, g, b, _ = image.cmap(image.norm(shade[i, j])) if np.isfinite(shade[i, j]) else (1, 1, 1, 1)
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, _short(v), ha="center", va="center", fontsize=7, color="white" if dark else "black")


def _short(v: float) -> str:
    """A cell's value in at most about 5 characters: 2.5, 9.99, 1042, 1.2e+07."""
    return f"{v:.0f}" if 1000 <= abs(v) < 100000 else f"{v:.3g}"


def _boxes(a, metric: str, size: int) -> list[tuple[int, ...]]:
    """The cells of the links named for `metric` at `size`, and every link of a named node."""
    index = {name: k for k, name in enumerate(a.names)}
    out = []
    for f in a.outliers:
        if f.metric != metric or f.size_bytes != size or f.confirmed is False:
            continue
        if f.kind in ("link", "direction"):  # a link boxes both cells, a direction its own (i -> j)
            i, j = index[f.names[0]], index[f.names[1]]
            out.append((min(i, j), max(i, j)) if f.kind == "link" else (i, j, 1))
        else:
            k = index[f.names[0]]
            out += [(k, j) for j in range(a.nodes) if j != k]
    return out


def map_plots(analyses: list) -> list[Plot]:
    """Every heatmap of every map (a map's label is added to the names when there are several)."""
    plots = []
    several = len(analyses) > 1
    for a in analyses:
        tag = f"_{a.label}" if several else ""
        attrs = a.map_attrs
        who = (
            f"{a.label}: {a.nodes} hosts, {attrs.get('schedule', '?')} schedule, "
            f"{attrs.get('kernel', '?')} kernel"
        )
        first = int(a.size_bytes[0])
        plots.append(
            heatmap(
                f"map_latency{tag}",
                a.latency_s * 1e6,
                a.names,
                f"One-way latency at {format_size(first)} (best trial)\n{who}",
                "µs",
                f"One-way latency of every pair at {first} B (best trial); colour: ratio to the map's "
                "median, red higher (worse).",
                "",
                _boxes(a, "latency", first),
                worse=WORSE_HIGH,
            )
        )
        for k, size in enumerate(a.size_bytes):
            size = int(size)
            label = format_size_bytes(size)
            plots.append(
                heatmap(
                    f"map_bandwidth_{label}{tag}",
                    a.bandwidth_bit_s[k] / 1e9,
                    a.names,
                    f"Bandwidth at {format_size(size)} (8·size / best one-way time)\n{who}",
                    "Gbit/s",
                    f"Bandwidth of every pair at {size} B (best trial){_direction_words(a)}; colour: "
                    "ratio to the map's median, red lower (worse).",
                    "",
                    _boxes(a, "bandwidth", size),
                )
            )
        plots += _energy_plots(a, tag, who) + _model_plots(a, tag, who)
    return plots


def _model_plots(a, tag: str, who: str) -> list[Plot]:
    """Each link's model through its sizes (map/model.py): alpha, beta and, with power, the
    energy per bit, each with its 95 % interval in the CSV and JSON."""
    m = a.model
    if m is None:
        return []
    sizes = f"through its {len(a.size_bytes)} sizes"
    out = [
        heatmap(
            f"map_model_alpha{tag}",
            m.alpha_s * 1e6,
            a.names,
            f"Model: alpha of every link (t = alpha + bits/beta {sizes})\n{who}",
            "µs",
            "Each link's alpha, the time of a message of no bytes in its model; colour: ratio to the "
            "map's median, red higher (worse). Intervals: the CSV's model_alpha_lo_s, model_alpha_hi_s.",
            worse=WORSE_HIGH,
        ),
        heatmap(
            f"map_model_beta{tag}",
            m.beta_bit_s / 1e9,
            a.names,
            f"Model: beta of every link (t = alpha + bits/beta {sizes})\n{who}",
            "Gbit/s",
            "Each link's beta, the bandwidth its time grows by; colour: ratio to the map's median, red "
            "lower (worse). Intervals: the CSV's model_beta_lo_bit_s, model_beta_hi_bit_s.",
        ),
    ]
    if m.energy_per_bit_j is not None:
        out.append(
            heatmap(
                f"map_model_energy_per_bit{tag}",
                m.energy_per_bit_j * 1e12,
                a.names,
                f"Model: energy per bit of every link (the slope of a message's energy {sizes})\n{who}",
                "pJ/bit",
                "Each link's energy per bit in its model: the growth of a message's energy (the pair's "
                "two nodes) with its bits; colour: ratio to the map's median, red higher (worse).",
                a.caveat,
                worse=WORSE_HIGH,
            )
        )
    return out


def _energy_plots(a, tag: str, who: str) -> list[Plot]:
    if a.energy is None:
        return []
    out = []
    e = a.energy
    for k, size in enumerate(a.size_bytes):
        label = format_size_bytes(int(size))
        out.append(
            heatmap(
                f"map_energy_{label}{tag}",
                e.energy_pj_bit[k],
                a.names,
                f"Energy per bit at {format_size(int(size))} (the pair's two nodes in its own window)\n{who}",
                "pJ/bit",
                f"Energy per bit of every pair at {int(size)} B: the two nodes' energy in the pair's round "
                "window divided by the bits the pair moved in it; colour: ratio to the map's median, red "
                "higher (worse).",
                a.caveat,
                worse=WORSE_HIGH,
            )
        )
        if e.dynamic_pj_bit is not None:
            out.append(
                heatmap(
                    f"map_dynamic_energy_{label}{tag}",
                    e.dynamic_pj_bit[k],
                    a.names,
                    f"Dynamic energy per bit at {format_size(int(size))} (above each node's idle)\n{who}",
                    "pJ/bit above idle",
                    f"Dynamic energy per bit of every pair at {int(size)} B: the two nodes' power above "
                    "their idle baselines over the pair's own window, divided by the bits moved; red "
                    "higher (worse).",
                    a.caveat,
                    worse=WORSE_HIGH,
                )
            )
    return out


def _direction_words(a) -> str:
    """How a map's bandwidth cell reads: one direction (row -> column) or the round trip."""
    if str(a.map_attrs.get("directions", "one")) == "both":
        return ", row host -> column host (each direction measured apart)"
    if str(a.map_attrs.get("mode", "pingpong")) == "pingpong":
        return ", round trip (both directions at once: a slow direction is not told apart)"
    return ""


def change_plots(change) -> list[Plot]:
    """Heatmaps of after / before (latency, bandwidth per size) of two maps, changed links boxed;
    none when they have fewer than two hosts in common (nothing compared: the text says so)."""
    if len(change.names) < 2:
        return []
    index = {name: k for k, name in enumerate(change.names)}

    def boxes(metric: str, size: int) -> list[tuple[int, int]]:
        out = []
        for f in change.findings:
            if f.metric == metric and f.size_bytes == size:
                if f.kind == "link":
                    out.append((index[f.names[0]], index[f.names[1]]))
                else:
                    k = index[f.names[0]]
                    out += [(k, j) for j in range(len(change.names)) if j != k]
        return out

    who = f"{change.after} / {change.before}"
    tag = f"_{change.after}"
    plots = [
        heatmap(
            f"map_change_latency{tag}",
            change.latency_ratio,
            change.names,
            f"Latency after / before ({who}) at the smallest size",
            "ratio (after / before)",
            "Latency of every pair after divided by before (below 1: faster).",
            "",
            boxes("latency", int(change.size_bytes[0])) if len(change.size_bytes) else [],
            diverging=True,
            worse=WORSE_HIGH,
        )
    ]
    for k, size in enumerate(change.size_bytes):
        label = format_size_bytes(int(size))
        plots.append(
            heatmap(
                f"map_change_bandwidth_{label}{tag}",
                change.bandwidth_ratio[k],
                change.names,
                f"Bandwidth after / before ({who}) at {format_size(int(size))}",
                "ratio (after / before)",
                f"Bandwidth of every pair at {int(size)} B after divided by before (above 1: faster).",
                "",
                boxes("bandwidth", int(size)),
                diverging=True,
            )
        )
    return plots
