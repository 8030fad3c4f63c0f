"""The benchmark pages of the documentation site, generated from the records in bench/results.

    python bench/pages.py            # writes docs/bench/*.md and their plots
    python bench/pages.py --check    # exit 1 if a page differs from what the records give

Each page holds one current table per benchmark: for every case (a mechanism on a table, a
library's mechanism, a command's variant) the latest record of that case, with the commit that
produced it, the command that reruns it and the machine it ran on. The history stays in the
records (every run is a JSON line) and in CHANGELOG.md. `tests/test_bench_pages.py` runs the
check, so a page cannot drift from its records.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGES = ROOT / "docs" / "bench"
RUN_PREFIX = "PYTHONPATH=. "  # the scripts import `_common` and jaxdp from the repository root


def records(name: str) -> list[dict]:
    with (RESULTS / name).open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


def latest(rows: Iterable[dict], case: Callable[[dict], tuple]) -> dict[tuple, dict]:
    """The last record of each case, in the order the cases first appear (records are appended
    as they run, so the last is the current one)."""
    current: dict[tuple, dict] = {}
    for row in rows:
        current.pop(case(row), None)
        current[case(row)] = row
    return current


def over_seeds(rows: Iterable[dict], case: Callable[[dict], tuple]) -> dict[tuple, list[dict]]:
    """Each case's current runs, one per seed (the latest record of each case and seed)."""
    grouped: dict[tuple, list[dict]] = {}
    for key, row in latest(rows, lambda r: (*case(r), r["seed"])).items():
        grouped.setdefault(key[:-1], []).append(row)
    return grouped


def mean_of(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def commits(rows: list[dict]) -> str:
    return ", ".join(sorted({commit(r) for r in rows}))


def commit(row: dict) -> str:
    return str(row.get("code_commit") or row.get("commit") or "?")


def machine(row: dict) -> str:
    device = row.get("device") or row.get("env", {}).get("device", "?")
    return f"{row.get('host_cpu', '?')}, {row.get('host_cores', '?')} cores, {device}"


def plain(text: str) -> str:
    """Text of a record as a reader of the site should see it: no tracker references."""
    return re.sub(r",?\s*\(?issues? #\d+\)?", "", text).strip()


def number(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


@dataclass
class Section:
    """One benchmark's current table: its title, what it measured, how to rerun it, the table
    and, where a figure reads better than the numbers, a bar plot of (label, value) pairs."""

    title: str
    about: str
    command: str
    header: list[str]
    body: list[list[str]]
    machines: set[str]
    plot: tuple[str, list[tuple[str, float]]] | None = None

    def markdown(self, figure: str | None) -> str:
        parts = [
            f"## {self.title}",
            self.about,
            f"Rerun: `{RUN_PREFIX if self.command.startswith('python') else ''}{self.command}`",
            table(self.header, self.body),
        ]
        parts.append("Machine: " + "; ".join(sorted(self.machines)) + ".")
        if figure:
            parts.append(f"![{self.title}]({figure})")
        return "\n\n".join(parts)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def presets_on_adult() -> Section:
    current = latest(records("presets_adult.jsonl"), lambda r: (r["mechanism"],))
    body, bars, machines = [], [], set()
    for (mechanism,), row in sorted(
        current.items(), key=lambda kv: _median([s["mean_l1"] for s in kv[1]["seeds"]])
    ):
        seeds = row["seeds"]
        l1 = _median([s["mean_l1"] for s in seeds])
        body.append(
            [
                f"`{mechanism}`",
                str(len(seeds)),
                number(l1),
                number(_median([s["max_abs"] for s in seeds])),
                number(_median([s["seconds"] for s in seeds]), 3),
                commit(row),
            ]
        )
        bars.append((mechanism, l1))
        machines.add(machine(row))
    return Section(
        "Every preset on ADULT",
        "Each mechanism at its defaults on the bundled ADULT table (48,842 records, 13 attributes),"
        " scored on all 3-way marginals at epsilon 1, delta 1e-9: the median over seeds of the mean"
        " L1 error per marginal and of the largest error of one cell; seconds are one release's.",
        "python bench/bench_presets.py --table adult",
        ["mechanism", "seeds", "mean L1", "max abs", "seconds", "commit"],
        body,
        machines,
        ("mean L1 over all 3-way marginals (lower is better)", bars),
    )


def accuracy_floors() -> Section:
    current = latest(records("accuracy_floors.jsonl"), lambda r: (r["mechanism"],))
    body, machines = [], set()
    for (mechanism,), row in sorted(current.items(), key=lambda kv: kv[1]["mean"]):
        body.append(
            [
                f"`{mechanism}`",
                str(len(row["errors"])),
                number(row["mean"]),
                number(row["sd"], 2),
                number(row["ceiling"]),
                commit(row),
            ]
        )
        machines.add(machine(row))
    return Section(
        "Accuracy floors",
        "The mean L1 error on ADULT-reduced (all 3-way marginals, epsilon 1) over five seeds, and the"
        " ceiling the full test tier holds each mechanism to (tests/mechanisms/test_accuracy_floors.py):"
        " a change that makes a mechanism worse than its ceiling fails the tests.",
        "python bench/bench_accuracy_floors.py",
        ["mechanism", "seeds", "mean L1", "sd", "ceiling", "commit"],
        body,
        machines,
    )


def _side_by_side(name: str, table: Callable[[dict], str]) -> dict[str, dict[tuple[str, str], list[dict]]]:
    """{table: {(library, mechanism): [current runs, one per seed]}} of a side-by-side record."""
    grouped: dict[str, dict[tuple[str, str], list[dict]]] = {}
    ok = (r for r in records(name) if r.get("ok"))
    for (table_name, library, mechanism), rows in over_seeds(
        ok, lambda r: (table(r), r["library"], r["mechanism"])
    ).items():
        grouped.setdefault(table_name, {})[(library, mechanism)] = rows
    return grouped


def _peer_section(title: str, about: str, command: str, runs: dict[tuple[str, str], list[dict]]) -> Section:
    """A side-by-side table, best mean L1 first, and its bar plot."""
    ranked = sorted(runs.items(), key=lambda kv: mean_of(kv[1], "mean_l1"))
    body = [
        [
            library,
            f"`{mechanism}`",
            str(len(rows)),
            number(mean_of(rows, "mean_l1")),
            number(mean_of(rows, "max_abs")),
            number(_median([r["wall_s"] for r in rows]), 3),
            commits(rows),
        ]
        for (library, mechanism), rows in ranked
    ]
    return Section(
        title,
        about,
        command,
        ["library", "mechanism", "seeds", "mean L1", "max abs", "process s", "bench commit"],
        body,
        {machine(r) for rows in runs.values() for r in rows},
        (
            "mean L1 (lower is better)",
            [(f"{lib} {mech}", mean_of(rows, "mean_l1")) for (lib, mech), rows in ranked],
        ),
    )


def against_dpsynth() -> list[Section]:
    sections = []
    for table_name, runs in _side_by_side("dpsynth.jsonl", lambda r: r["table"]).items():
        sizes = next(iter(runs.values()))[0]["sizes"]
        about = (
            f"{sizes['records']:,} records, {sizes['attributes']} attributes, {sizes['marginals']}"
            " workload marginals; epsilon 1, delta 1e-9, add-remove. Each library's process run"
            " end to end on the same table and workload, in the same run; the mean over seeds of"
            " the mean L1 error per marginal and of the largest cell error."
        )
        command = f"python bench/bench_dpsynth.py --tables {table_name}"
        sections.append(_peer_section(f"Against DPSynth: {table_name}", about, command, runs))
    return sections


# The bar jaxdp is held to against DPSynth on every table: its best mean L1 at most this share of
# DPSynth's best, its lowest max error no higher than DPSynth's lowest, and its AIM's whole process
# at most this share of DPSynth's AIM's
L1_SHARE, TIME_SHARE = 0.9, 0.1


def _best(runs: dict[tuple[str, str], list[dict]], library: str, key: str) -> tuple[str, float] | None:
    """(mechanism, mean over seeds) of `library`'s lowest mean of `key`, None without runs."""
    means = [(mech, mean_of(rows, key)) for (lib, mech), rows in runs.items() if lib == library]
    return min(means, key=lambda pair: pair[1]) if means else None


def _verdict(ratio: float, target: float = TIME_SHARE) -> str:
    return "met" if ratio <= target else "missed"


def dpsynth_standing() -> Section:
    """Per table: jaxdp's best against DPSynth's best, mean L1 and max error, and AIM's process
    time against DPSynth's AIM's, with whether each target is met."""
    body, machines = [], set()
    # the cap a timed-out DPSynth AIM ran to (its time is at least that), by table
    caps = {
        r["table"]: r["cap_s"]
        for r in records("dpsynth.jsonl")
        if r.get("timed_out") and r["mechanism"] == "aim" and r["library"] == "dpsynth"
    }
    for table_name, runs in _side_by_side("dpsynth.jsonl", lambda r: r["table"]).items():
        machines |= {machine(r) for rows in runs.values() for r in rows}
        ours, theirs = _best(runs, "jaxdp", "mean_l1"), _best(runs, "dpsynth", "mean_l1")
        our_max, their_max = _best(runs, "jaxdp", "max_abs"), _best(runs, "dpsynth", "max_abs")
        our_time = _median([r["wall_s"] for r in runs.get(("jaxdp", "aim"), [])])
        their_time = _median([r["wall_s"] for r in runs.get(("dpsynth", "aim"), [])])
        if ours is None or theirs is None:
            continue
        l1_ratio = ours[1] / theirs[1]
        time_ratio = None if our_time is None or their_time is None else our_time / their_time
        timed_out = their_time is None and table_name in caps and our_time is not None
        if timed_out:  # DPSynth's AIM took longer than its cap: the ratio is below our / cap
            time_ratio = our_time / caps[table_name]
        body.append(
            [
                table_name,
                f"{number(ours[1])} (`{ours[0]}`)",
                f"{number(theirs[1])} (`{theirs[0]}`)",
                f"{l1_ratio:.2f} {_verdict(l1_ratio, L1_SHARE)}",
                f"{number(our_max[1])} (`{our_max[0]}`)",
                f"{number(their_max[1])} (`{their_max[0]}`)",
                "met" if our_max[1] <= their_max[1] else "missed",
                "-" if time_ratio is None else f"{'< ' * timed_out}{time_ratio:.3f} {_verdict(time_ratio)}",
                f"DPSynth's AIM past its {caps[table_name]:.0f} s cap"
                if timed_out
                else "no DPSynth AIM run"
                if ("dpsynth", "aim") not in runs
                else "",
            ]
        )
    return Section(
        "Against DPSynth: where jaxdp stands",
        f"On every table of the sections below (their seeds and commits): jaxdp's best mean L1 over"
        f" its mechanisms against DPSynth's best (target: at most {L1_SHARE}x), jaxdp's lowest mean max"
        f" error against DPSynth's lowest (target: no higher), and the median whole-process time of"
        f" jaxdp's AIM against DPSynth's AIM (target: at most {TIME_SHARE}x).",
        "python bench/bench_dpsynth.py --tables pile adult9 pums adult6 binary16",
        [
            "table",
            "jaxdp mean L1",
            "DPSynth mean L1",
            "ratio",
            "jaxdp max error",
            "DPSynth max error",
            "max",
            "AIM time ratio",
            "note",
        ],
        body,
        machines,
    )


def against_peers_on_adult6() -> Section:
    return _peer_section(
        "Against SmartNoise and dpmm: ADULT, six attributes",
        "ADULT's age, education-num, marital-status, occupation, sex and income (48,842 records),"
        " the 20 marginals of up to 3 of them; epsilon 1, delta 1e-9. Every library's command run"
        " end to end, side by side, in one run.",
        "python bench/peers.py --seeds 0 1 2 3 4",
        _side_by_side("peers_e2e_adult6.jsonl", lambda r: "adult6")["adult6"],
    )


def accountants() -> Section:
    grouped = over_seeds(
        records("pld.jsonl"),
        lambda r: (r["sizes"]["table"], r["mechanism"], r["epsilon"], r["delta"], r["conversion"]),
    )
    machines = {machine(r) for rows in grouped.values() for r in rows}
    body = [
        [
            table_name,
            f"`{mechanism}`",
            f"{epsilon:g}, {delta:g}",
            conversion,
            str(len(rows)),
            number(mean_of(rows, "mean_l1")),
            number(mean_of(rows, "epsilon_zcdp"), 4),
            commits(rows),
        ]
        for (table_name, mechanism, epsilon, delta, conversion), rows in sorted(grouped.items())
    ]
    return Section(
        "Accountants: what a tighter conversion buys",
        "The same mechanism at the same (epsilon, delta) calibrated by each accountant it supports"
        " (all 3-way marginals): the mean L1 error over seeds, and the epsilon the plain zCDP"
        " conversion would state for what was spent (above the target where the tighter accountant"
        " let the mechanism spend more).",
        "python bench/bench_pld.py",
        ["table", "mechanism", "epsilon, delta", "conversion", "seeds", "mean L1", "zCDP epsilon", "commit"],
        body,
        machines,
    )


def whole_processes() -> Section:
    rows = [r for r in records("latency.jsonl") if r.get("code") == "this"]
    current = latest(rows, lambda r: (r["kernel"], r["variant"]))
    body, machines = [], set()
    for (_, variant), row in current.items():
        body.append(
            [
                f"`{row['sizes']['argv'].split(' --out')[0]}`",
                variant,
                number(row["wall_s"]["median"], 3),
                number(row["cpu_s"]["median"], 3),
                str(row["repeats"]),
                number(row["load_avg_before"], 2),
                commit(row),
            ]
        )
        machines.add(machine(row))
    return Section(
        "Whole command-line processes",
        "`python -m jaxdp ...` from start to exit (import, read, compile, run, write), the median of"
        " repeats: cold with an empty compile cache, warm with the cache a first run left, no-cache"
        " without one. The load average of the machine when it started is beside it.",
        "python bench/bench_latency.py",
        ["command", "variant", "wall s", "CPU s", "repeats", "load", "commit"],
        body,
        machines,
    )


def on_the_gpu() -> Section:
    current = latest(records("gpu_h200.jsonl"), lambda r: (r["kernel"], r.get("strategy"), r.get("variant")))
    body, machines = [], set()
    for (kernel, strategy, variant), row in current.items():
        seconds = row.get("median_s", row.get("seconds"))
        if seconds is None and isinstance(row.get("wall_s"), dict):
            seconds = row["wall_s"]["median"]
        body.append(
            [
                f"`{kernel}`",
                plain(str(row.get("mechanism") or row.get("counter") or "")),
                plain(str(strategy or variant or "")),
                number(seconds, 3),
                commit(row),
            ]
        )
        machines.add(machine(row))
    return Section(
        "On one GPU",
        "The GPU script's cases on one NVIDIA H200: seconds are the median of repeats where the case"
        " repeats, the whole process for the command-line cases.",
        "bash bench/bench_gpu.sh",
        ["case", "what", "variant", "seconds", "commit"],
        body,
        machines,
    )


PAGE_SECTIONS: dict[str, tuple[str, str, Callable[[], list[Section]]]] = {
    "accuracy.md": (
        "Accuracy",
        "How close each mechanism's release comes to the real table's marginals.",
        lambda: [presets_on_adult(), accuracy_floors(), accountants()],
    ),
    "peers.md": (
        "Against other libraries",
        "jaxdp beside other libraries' mechanisms, each run end to end in the same run on the same"
        " machine. A figure quoted from a paper is not a result here.",
        lambda: [dpsynth_standing(), *against_dpsynth(), against_peers_on_adult6()],
    ),
    "speed.md": (
        "Speed",
        "Time to a release as a user meets it: whole processes, and the accelerator's cases.",
        lambda: [whole_processes(), on_the_gpu()],
    ),
}


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def render(write_plots: bool) -> dict[str, str]:
    """{page file: Markdown}; with write_plots, each section's figure written beside it."""
    pages = {}
    for page, (title, about, build) in PAGE_SECTIONS.items():
        parts = [
            f"# {title}",
            about + " Generated by `python bench/pages.py` from `bench/results/*.jsonl`; do not edit.",
        ]
        for section in build():
            figure = None
            if section.plot:
                figure = f"{page.removesuffix('.md')}-{_slug(section.title)}.png"
                if write_plots:
                    _bar_plot(PAGES / figure, *section.plot)
            parts.append(section.markdown(figure))
        pages[page] = "\n\n".join(parts) + "\n"
    return pages


def _bar_plot(path: Path, label: str, bars: list[tuple[str, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.35 * len(bars) + 1.2))
    names = [name for name, _ in bars][::-1]
    ax.barh(names, [value for _, value in bars][::-1], color="#3b6ea5")
    if max(value for _, value in bars) > 20 * min(value for _, value in bars):
        ax.set_xscale("log")  # one baseline far behind the rest would flatten every other bar
    ax.set_xlabel(label)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


BENCH_README = ROOT / "bench" / "README.md"
STANDING = ("<!-- dpsynth-standing: generated by bench/pages.py -->", "<!-- end dpsynth-standing -->")


def with_standing(readme: str) -> str:
    """bench/README.md with the DPSynth standing table between its markers regenerated."""
    start, end = STANDING
    head, rest = readme.split(start, 1)
    _, tail = rest.split(end, 1)
    section = dpsynth_standing()
    block = "\n\n".join([section.about, table(section.header, section.body)])
    return f"{head}{start}\n{block}\n{end}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare the pages with the records")
    args = parser.parse_args(argv)
    pages = render(write_plots=not args.check)
    files = {PAGES / name: text for name, text in pages.items()}
    files[BENCH_README] = with_standing(BENCH_README.read_text())
    stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} differs from bench/results: run python bench/pages.py",
                file=sys.stderr,
            )
        return 1 if stale else 0
    PAGES.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
