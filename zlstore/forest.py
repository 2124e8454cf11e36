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

import functools
import html
import io
import json
import re
from importlib import resources
from typing import Dict, List, Mapping, Sequence

import yaml

# Where the dashboard keeps the chart this module draws.
DASHBOARD, CHART = "campaign", "ranges"
# What the picture's <metadata> description starts with, before its JSON.
DATA_PREFIX = "zlstore forest plot data: "


@functools.lru_cache(maxsize=None)
def dashboard_chart() -> dict:
    """The dashboard's forest chart as metadata.yaml defines it."""
    text = resources.files("zlstore").joinpath("metadata.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["plugins"]["datasette-dashboards"][DASHBOARD]["charts"][CHART]


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


def forest_svg(rows: Sequence[Mapping], title: str = "") -> str:
    """The forest plot of rows (forest_rows) as SVG text: matplotlib, Agg
    backend, text kept as text, ids fixed (the same rows give the same file)."""
    import matplotlib  # noqa: PLC0415 (only the report pays for matplotlib's import)

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415 (after use("Agg"): pyplot takes its backend on import)
    from matplotlib.lines import Line2D  # noqa: PLC0415 (matplotlib's, as above)

    colors = finding_colors()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "zlstore", "font.size": 9}):
        figure, axes = pyplot.subplots(figsize=(9, 1.2 + 0.28 * max(len(rows), 1)))
        try:
            _draw(axes, rows, colors)
            handles = [Line2D([], [], color=color, lw=3, marker="o", label=name) for name, color in colors.items()]
            axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, title="finding")
            axes.set_title(title or "each shape's effect with its 95% interval", loc="left")
            figure.tight_layout()
            buffer = io.StringIO()
            described = DATA_PREFIX + json.dumps(plotted(rows), separators=(",", ":"))
            figure.savefig(buffer, format="svg", metadata={"Date": None, "Description": described})
        finally:
            pyplot.close(figure)
    return buffer.getvalue()


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
    from matplotlib import ticker  # noqa: PLC0415 (matplotlib's: forest_svg imports it)

    axes.xaxis.set_major_locator(ticker.MaxNLocator(8))  # a campaign's ratios span little: plain ticks read best
    axes.xaxis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axes.xaxis.set_minor_formatter(ticker.NullFormatter())
    axes.set_yticks(positions, [row["label"] for row in rows])
    axes.set_ylim(-0.7, len(rows) - 0.3)
    axes.set_xlabel("before / after (above 1: faster with the switch), log scale")
    axes.grid(axis="x", color="#f0f0f0", lw=0.5)


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
