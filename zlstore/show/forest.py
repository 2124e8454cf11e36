"""The picture of a campaign: each shape's effect with its 95% interval,
coloured by finding, on a log axis with the no-change band and 1 marked: a
forest plot. It is the dashboard's chart (metadata.yaml, campaign /
ranges) drawn by matplotlib into one SVG, so that it travels without
datasette: the rows come from that chart's own query, the colours from its
own scale, so the two can never say different things.

The SVG carries what it plots: the rows as JSON in its <metadata>
(dc:description), and an id per mark (interval-N, effect-N; N the row's
position), so that a test or a script reads the picture's data back from
the file, not from its pixels."""

import contextlib
import functools
import html
import io
import json
import math
import re
import textwrap
from importlib import resources
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import yaml

from ..names import EFFECT_FINDINGS

# Where the dashboard keeps the chart this module draws.
DASHBOARD, CHART = "campaign", "ranges"
# What the picture's <metadata> description starts with, before its JSON.
DATA_PREFIX = "zlstore forest plot data: "


@functools.lru_cache(maxsize=None)
def dashboard_chart() -> dict:
    """The dashboard's forest chart as metadata.yaml defines it."""
    text = resources.files("zlstore").joinpath("metadata.yaml").read_text(encoding="utf-8")
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's where there is one: 10 times faster
    return yaml.load(text, Loader=loader)["plugins"]["datasette-dashboards"][DASHBOARD]["charts"][CHART]


def finding_colors() -> Dict[str, str]:
    """Finding name -> colour, the dashboard chart's own scale."""
    for layer in dashboard_chart()["display"]["layer"]:
        scale = layer.get("encoding", {}).get("color", {}).get("scale")
        if scale:
            return dict(zip(scale["domain"], scale["range"]))
    raise LookupError("the dashboard's ranges chart has no colour scale")


def forest_rows(store, root_name: str) -> List[dict]:
    """The rows the dashboard's chart plots for one campaign or repeat root:
    label, effect, ci_low, ci_high, finding, band_low, band_high ..."""
    return [dict(row) for row in store.db.query(dashboard_chart()["query"], {"root": root_name})]


# At most this many rows are drawn: a campaign of thousands of ranges
# would give a picture nobody reads, and matplotlib laying out a label per
# range took most of a minute (issue 43). The rest are counted.
MAX_ROWS = 60
# A shape's label is cut to this many characters in the picture (the
# metadata keeps it whole): one long shape would squeeze every interval.
LABEL_CHARS = 48


def _width(row: Mapping) -> float:
    """How wide a range's interval is, on the log scale (0 without one)."""
    low, high = row.get("ci_low"), row.get("ci_high")
    if low is None or high is None or not (0 < low <= high < math.inf):
        return 0.0
    return math.log(high / low)


def _size(row: Mapping) -> float:
    effect = row.get("effect")
    return abs(math.log(effect)) if effect is not None and 0 < effect < math.inf else 0.0


def pick(rows: Sequence[Mapping], limit: int = MAX_ROWS) -> List[Mapping]:
    """The rows a picture draws, at most limit, in the rows' own order:
    every finding that the switch changed a shape (faster, slower: the
    largest effects where they are more), then the widest intervals."""
    if len(rows) <= limit:
        return list(rows)
    positions = range(len(rows))
    effects = sorted((i for i in positions if rows[i].get("finding") in EFFECT_FINDINGS), key=lambda i: -_size(rows[i]))
    rest = sorted(
        (i for i in positions if rows[i].get("finding") not in EFFECT_FINDINGS), key=lambda i: -_width(rows[i])
    )
    return [rows[i] for i in sorted((effects + rest)[:limit])]


def drawn_note(drawn: int, total: int) -> str:
    """What the picture leaves out, said under it (and in its title)."""
    if drawn >= total:
        return ""
    return (
        f"{drawn} of {total} ranges drawn: the findings of faster or slower first, then the widest "
        f"intervals; the other {total - drawn} are in the tables"
    )


def forest_svg(rows: Sequence[Mapping], title: str = "", total: Optional[int] = None) -> str:
    """The forest plot of rows (forest_rows, or pick's of them, of total
    rows in all) as SVG text: matplotlib, Agg backend, text kept as text,
    ids fixed (the same rows give the same file)."""
    with drawing(rows, title, total) as figure:
        buffer = io.StringIO()
        described = DATA_PREFIX + json.dumps(plotted(rows), separators=(",", ":"))
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Description": described})
    return buffer.getvalue()


@contextlib.contextmanager
def drawing(rows: Sequence[Mapping], title: str = "", total: Optional[int] = None):
    """The picture as a matplotlib figure, laid out, its ticks placed, under
    the settings it is saved with (closed on leaving). No text of it is
    read as mathtext: a label is data, and `$` a dollar."""
    import matplotlib  # noqa: PLC0415 (only the report pays for matplotlib's import)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415 (after use("Agg"): pyplot takes its backend on import)
    from matplotlib.lines import Line2D  # noqa: PLC0415 (matplotlib's, as above)

    colors = finding_colors()
    settings: Dict[str, Any] = {"svg.fonttype": "none", "svg.hashsalt": "zlstore", "font.size": 9}
    settings["text.parse_math"] = False
    with matplotlib.rc_context(settings):  # type: ignore[arg-type]  # (its stub lists the keys: a dict is not one)
        figure, axes = pyplot.subplots(figsize=(9, 1.2 + 0.28 * max(len(rows), 1)))
        try:
            _draw(axes, rows, colors)
            handles = [Line2D([], [], color=color, lw=3, marker="o", label=name) for name, color in colors.items()]
            axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="finding")
            left_out = drawn_note(len(rows), total if total is not None else len(rows))
            heading = title or "each shape's effect with its 95% interval"
            axes.set_title("\n".join(textwrap.wrap(heading, 70) + textwrap.wrap(left_out, 70)), loc="left")
            figure.tight_layout()
            _ticks(axes)  # on the axes' laid-out width, so that no two labels overlap
            yield figure
        finally:
            pyplot.close(figure)


def _label(row: Mapping) -> str:
    label = str(row["label"])
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "\u2026"


def _draw(axes, rows: Sequence[Mapping], colors: Mapping[str, str]):
    """The dashboard's layers: the no-change band, a dashed rule at 1, each
    interval a thick line and each effect a dot, top to bottom in the rows' order."""
    positions = list(range(len(rows)))[::-1]
    if rows:
        axes.axvspan(rows[0]["band_low"], rows[0]["band_high"], color="#e6e6e6", zorder=0, gid="no-change-band")
    axes.axvline(1, color="#555555", linestyle=(0, (4, 4)), lw=1, zorder=1, gid="one")
    for i, (row, y) in enumerate(zip(rows, positions)):
        color = colors.get(row["finding"], "#000000")
        if row["ci_low"] is not None:
            axes.plot(
                [row["ci_low"], row["ci_high"]],
                [y, y],
                color=color,
                lw=3,
                solid_capstyle="butt",
                zorder=2,
                gid=f"interval-{i}",
            )
        if row["effect"] is not None:
            axes.plot([row["effect"]], [y], "o", color=color, markersize=5, zorder=3, gid=f"effect-{i}")
    axes.set_xscale("log")
    axes.set_xlim(*limits(rows))
    axes.set_yticks(positions, [_label(row) for row in rows])
    axes.set_ylim(-0.7, len(rows) - 0.3)
    axes.set_xlabel("before / after (above 1: faster with the switch), log scale")
    axes.grid(axis="x", color="#f0f0f0", lw=0.5)


def limits(rows: Sequence[Mapping]) -> Tuple[float, float]:
    """The x axis's extent: every effect, interval and the no-change band
    (so 1 always), with a little room either side on the log scale."""
    values = [1.0] + [row.get(k) for row in rows for k in ("effect", "ci_low", "ci_high", "band_low", "band_high")]
    finite = [float(v) for v in values if v is not None and 0 < v < math.inf]
    low, high = math.log10(min(finite)), math.log10(max(finite))
    pad = max(0.05 * (high - low), 0.004)
    return 10 ** (low - pad), 10 ** (high + pad)


# Ticks on a wide axis (more than LOG_RATIO from end to end): a ladder's
# values in each decade [1, 10), times its power of ten, the finest ladder
# that gives no more than MAX_TICKS. Each holds 1, so 1 is always a tick.
LADDERS = (
    (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9),
    (1, 1.5, 2, 3, 5, 7),
    (1, 2, 5),
    (1,),
)
LOG_RATIO = 4.0
# On a narrow axis, ticks evenly spaced by the smallest of these steps (times
# a power of ten) that gives no more than MAX_TICKS: each divides 1.
STEPS = (1, 2, 5)
MAX_TICKS = 9


def tick_text(value: float) -> str:
    """A tick's label as people write the number: 0.05, 1, 1.05, 30, 1000."""
    if 1e-4 <= abs(value) < 1e7:
        return f"{value:.6f}".rstrip("0").rstrip(".")
    return f"{value:g}"


def _tidy(value: float) -> float:
    return float(f"{value:.6g}")


def ticks(low: float, high: float) -> List[float]:
    """Readable ticks for a log axis from low to high, 1 among them when it
    is in range: over a wide axis from a ladder of round numbers per decade
    (0.05, 0.1, 0.2, 0.5, 1, 2 ...; every other decade where even decades
    are too many), over a narrow one evenly spaced (0.95, 1, 1.05 ...)."""
    if high / low > LOG_RATIO:
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        found: List[float] = []
        for ladder in LADDERS:
            found = sorted(
                {v for v in (_tidy(m * 10.0**p) for p in range(first, last + 1) for m in ladder) if low <= v <= high}
            )
            if len(found) <= MAX_TICKS:
                return found
        every = math.ceil(len(found) / MAX_TICKS)  # many decades: every step-th, counted from 1's
        return [v for v in found if round(math.log10(v)) % every == 0]
    for power in range(math.floor(math.log10(high - low)) - 2, math.floor(math.log10(high)) + 2):
        for base in STEPS:
            step = base * 10.0**power
            found = [_tidy(k * step) for k in range(math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9) + 1)]
            if len(found) <= MAX_TICKS:
                return found
    return [1.0] if low <= 1 <= high else []


def thinned(values: Sequence[float], low: float, high: float, width_pt: float, font_pt: float) -> List[float]:
    """values less those whose label would touch the one kept before it
    (1 always kept), where the axis from low to high is width_pt wide and a
    character about 0.6 of font_pt."""
    span = math.log10(high / low)

    def at(v):
        return width_pt * math.log10(v / low) / span

    def half(v):
        return 0.6 * font_pt * len(tick_text(v)) / 2 + font_pt / 2  # and a gap of half a character each side

    kept: List[float] = [1.0] if low <= 1 <= high else []
    for v in sorted(values, key=lambda v: (v != 1.0, abs(math.log(v)))):  # outward from 1
        if all(abs(at(v) - at(k)) >= half(v) + half(k) for k in kept):
            kept.append(v)
    return sorted(kept)


def _ticks(axes):
    """The x axis's ticks and labels, thinned to the width the axes were laid out at."""
    from matplotlib import ticker  # noqa: PLC0415 (matplotlib's: forest_svg imports it)

    low, high = axes.get_xlim()
    width_pt = axes.get_window_extent().width * 72 / axes.figure.dpi
    font_pt = axes.xaxis.get_ticklabels()[0].get_fontsize() if axes.xaxis.get_ticklabels() else 9
    values = thinned(ticks(low, high), low, high, width_pt, font_pt)
    axes.xaxis.set_major_locator(ticker.FixedLocator(values))
    axes.xaxis.set_major_formatter(ticker.FixedFormatter([tick_text(v) for v in values]))
    axes.xaxis.set_minor_locator(ticker.NullLocator())


def plotted(rows: Sequence[Mapping]) -> List[dict]:
    """What the picture shows of each row, as its <metadata> carries it."""
    keys = ("label", "finding", "effect", "ci_low", "ci_high", "rounds", "q_value")
    return [{k: row.get(k) for k in keys} for row in rows]


def read_back(svg: str) -> List[dict]:
    """The rows a forest SVG plotted, from its <metadata> (plotted())."""

    found = re.search(r"<dc:description>(.*?)</dc:description>", svg, re.S)
    if not found or not html.unescape(found.group(1)).startswith(DATA_PREFIX):
        raise ValueError("not a zlstore forest plot: no data in its metadata")
    return json.loads(html.unescape(found.group(1))[len(DATA_PREFIX) :])
