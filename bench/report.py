"""Render the benchmark report: docs/bench/*.json -> docs/bench/README.md and a PNG each.

    python -m bench.report [--dir docs/bench]

The last step of `make bench`; also run it alone after any one benchmark. It lists what is
present: one markdown table per benchmark (figure, value, its peer or floor, the ratio, the
goal and whether it is met), the commit and date of each, and the machine(s) they ran on;
each chart shows a benchmark's ratios as bars with 1 (the peer or floor) and the goals
marked. The JSON files are written by the benchmarks through bench/results.py. Needs
matplotlib (`pip install -e '.[bench]'`).
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import results

Doc = dict[str, Any]

# (key, label): bare values first, then the labelled versions.
LABEL_WIDTH = 60  # characters per line of a bar's label
MACHINE_FIELDS = (
    ("cores", "{} cores"),
    ("memory_gb", "{} GB memory"),
    ("cpu", "{}"),
    ("os", "{}"),
    ("python", "Python {}"),
    ("java", "Java: {}"),
    ("spark", "Spark {}"),
    ("kafka", "Kafka {}"),
    ("cassandra", "Cassandra {}"),
    ("delta", "Delta Lake {}"),
    ("confluent_kafka", "confluent-kafka {}"),
)


def number(value: float | None) -> str:
    """Readable at a glance: thousands separated, few decimals for small numbers."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def figure_row(fig: Doc) -> str:
    unit = fig.get("unit", "")
    kind = "peer" if "peer" in fig else "floor" if "floor" in fig else None
    reference = "—"
    if kind is not None:
        reference = f"{kind}: {fig[kind]} = {number(fig.get(f'{kind}_value'))} {unit}".rstrip()
    ratio = number(fig.get("ratio")) if kind is not None else "—"
    goal, met = "—", "—"
    if "goal" in fig:
        g = fig["goal"]
        goal = f"{g['op']} {number(g['ratio'])}" + (f" ({g['source']})" if g.get("source") else "")
        met = "yes" if g["met"] else "**no**"
    cells = [fig["name"], f"{number(fig['value'])} {unit}".rstrip(), reference, ratio, goal, met]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def machine_key(machine: Doc) -> str:
    return json.dumps(machine, sort_keys=True)


def machine_line(machine: Doc) -> str:
    parts = [f.format(machine[k]) for k, f in MACHINE_FIELDS if machine.get(k) is not None]
    extra = sorted(k for k in machine if k not in dict(MACHINE_FIELDS))
    parts += [f"{k} {machine[k]}" for k in extra]
    return ", ".join(parts)


def section(doc: Doc, machine_label: str | None = None) -> str:
    """One benchmark: what ran, when, on which commit and machine, then its figures."""
    commit = doc["commit"]
    sha = str(commit.get("sha", "unknown"))[:10]
    dirty = (
        f" with {len(commit.get('modified', []))} modified tracked file(s)"
        if commit.get("dirty")
        else ""
    )
    load = f", load {doc['load_avg_1m']}" if doc.get("load_avg_1m") is not None else ""
    lines = [
        f"## {doc['benchmark']}",
        "",
        f"`{doc.get('command', doc['benchmark'])}` at {doc['measured_at']}, "
        f"commit `{sha}`{dirty}{load}"
        + (f", machine {machine_label}" if machine_label else "")
        + ".",
    ]
    if doc.get("notes"):
        lines += ["", str(doc["notes"])]
    lines += [
        "",
        "| figure | value | peer / floor | ratio | goal | met |",
        "|---|---|---|---|---|---|",
        *(figure_row(f) for f in doc["figures"]),
    ]
    if charted(doc):
        lines += ["", f"![{doc['benchmark']}: ratios]({doc['benchmark']}.png)"]
    return "\n".join(lines) + "\n"


def summary_row(doc: Doc) -> str:
    """The benchmark's first figure with a ratio: its headline."""
    head = next((f for f in doc["figures"] if f.get("ratio") is not None), None)
    if head is None:
        cells = [doc["benchmark"], "—", "—", "—", doc["measured_at"][:10]]
    else:
        met = "—" if "goal" not in head else "yes" if head["goal"]["met"] else "**no**"
        ref = head.get("peer") or head.get("floor")
        cells = [doc["benchmark"], f"{head['name']} / {ref}", number(head["ratio"]), met]
        cells.append(doc["measured_at"][:10])
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render(docs: Sequence[Doc]) -> str:
    """The whole docs/bench/README.md, benchmarks in name order."""
    docs = sorted(docs, key=lambda d: str(d["benchmark"]))
    machines: list[str] = []
    for d in docs:
        if machine_key(d["machine"]) not in machines:
            machines.append(machine_key(d["machine"]))
    labels = {m: chr(ord("A") + i) for i, m in enumerate(machines)}
    out = [
        "# Benchmark report",
        "",
        "Written by `bench/report.py` from the JSON files beside it (one per benchmark, "
        "from `bench/results.py`); `make bench` reruns every benchmark and this report. "
        "Each figure is a ratio to a peer or floor measured in the same run: compare "
        "ratios, not absolute numbers, across runs of a shared machine.",
        "",
    ]
    if not docs:
        return "\n".join([*out, "No results yet: run `make bench`.", ""])
    if len(machines) == 1:
        out += [f"Machine: {machine_line(docs[0]['machine'])}.", ""]
    else:
        out += ["Machines:", ""]
        out += [f"- {labels[m]}: {machine_line(json.loads(m))}" for m in machines]
        out += [""]
    out += [
        "| benchmark | headline ratio | ratio | goal met | measured |",
        "|---|---|---|---|---|",
        *(summary_row(d) for d in docs),
        "",
    ]
    for d in docs:
        label = labels[machine_key(d["machine"])] if len(machines) > 1 else None
        out.append(section(d, label))
    return "\n".join(out)


def charted(doc: Doc) -> list[Doc]:
    """The figures a chart shows: those with a ratio."""
    return [f for f in doc["figures"] if f.get("ratio") is not None]


def chart(doc: Doc, path: Path) -> None:
    """Ratios as bars (green: goal met, red: missed, grey: no goal); 1 and goals (blue) marked."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    figs = charted(doc)
    # Wrapped, so that a long name (a variant's settings, a baseline's commit) is shown
    # whole beside its bar, not cut at the figure's edge.
    labels = [
        "\n".join(
            textwrap.fill(part, LABEL_WIDTH)
            for part in (
                f["name"],
                f"vs {f.get('peer') or f.get('floor')}",
                *([f"(goal {f['goal']['op']} {f['goal']['ratio']:g})"] if "goal" in f else []),
            )
        )
        for f in figs
    ]
    ratios = [float(f["ratio"]) for f in figs]
    shown = [max(r, 1e-3) for r in ratios]  # a log axis has no 0
    colors = [
        "#9e9e9e" if "goal" not in f else "#2e7d32" if f["goal"]["met"] else "#c62828" for f in figs
    ]
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    fig, ax = plt.subplots(figsize=(9, 1.0 + len(figs) * max(0.75, 0.19 * lines)))
    y = list(range(len(figs)))[::-1]
    # A log axis with bars from 1 (parity): x2 and x0.5 look equally far from the peer,
    # and a 40x ratio does not flatten the others.
    ax.set_xscale("log")
    ax.barh(y, [r - 1 for r in shown], left=1, color=colors, height=0.6)
    ax.axvline(1.0, color="black", linewidth=0.8)
    goals = [float(f["goal"]["ratio"]) for f in figs if "goal" in f]
    for yi, f, r, c in zip(y, figs, ratios, colors, strict=True):
        ax.plot([max(r, 1e-3)], [yi], "o", color=c, markersize=5)  # seen even at 1.00
        ax.text(max(r, 1e-3), yi, f"  {r:.2f}  ", va="center", fontsize=9,
                ha="left" if r >= 1 else "right")  # fmt: skip
        if "goal" in f:
            g = float(f["goal"]["ratio"])
            ax.plot([g, g], [yi - 0.4, yi + 0.4], color="#1565c0", linewidth=2)
    ax.set_yticks(y, labels, fontsize=8)
    lo, hi = min([*shown, *goals, 1.0]) / 2, max([*shown, *goals, 1.0]) * 2
    ax.set_xlim(lo, hi)
    steps = [m * 10.0**e for e in range(-3, 4) for m in (1, 2, 5)]
    ax.set_xticks([t for t in steps if lo <= t <= hi], minor=False)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("ratio to the peer or floor (log scale; 1 = equal)")
    sha = str(doc["commit"].get("sha", ""))[:10]
    ax.set_title(f"{doc['benchmark']}: {doc['measured_at']}, commit {sha}", fontsize=10)
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dir", type=Path, default=results.DOCS_BENCH, help="results directory (docs/bench)"
    )
    args = parser.parse_args(argv)
    paths = sorted(args.dir.glob("*.json"))
    try:
        docs = [results.load(p) for p in paths]
    except ValueError as e:
        print(f"report: {e}", file=sys.stderr)
        return 2
    args.dir.mkdir(parents=True, exist_ok=True)
    for d in docs:
        if charted(d):
            chart(d, args.dir / f"{d['benchmark']}.png")
    (args.dir / "README.md").write_text(render(docs))
    names = ", ".join(str(d["benchmark"]) for d in docs) or "none"
    print(f"report: {args.dir / 'README.md'} ({len(docs)} benchmarks: {names})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
