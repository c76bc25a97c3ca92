"""The benchmark's results as tables, and each target of issue 14 with its measured value."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.harness import Cell

PAGES = ("page-after", "name-prefix", "identifier", "children", "below-page1", "include-page")
# workload -> (ratio wanted on SQLite 100k, on PostgreSQL 1M), at c=16
RATIOS = {"read": (0.5, 0.35), "page-after": (0.35, 0.2), "name-prefix": (0.35, 0.2), "identifier": (0.35, 0.2),
          "children": (0.35, 0.2), "below-page1": (0.35, 0.2), "include-page": (0.35, 0.2)}


def find(cells: Sequence[Cell], dataset: str, workload: str, server: str, concurrency: int) -> Cell | None:
    return next((c for c in cells if (c.dataset, c.workload, c.server, c.concurrency) ==
                 (dataset, workload, server, concurrency)), None)


def cells_table(cells: Sequence[Cell]) -> str:
    lines = ["| dataset | workload | c | ours req/s | p50 ms | p99 ms | ceiling req/s | ratio | fhirsnake req/s | "
             "non-2xx (ours/ceiling/fhirsnake) |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        if c.server != "ours":
            continue
        top = find(cells, c.dataset, c.workload, "ceiling", c.concurrency)
        snake = find(cells, c.dataset, c.workload, "fhirsnake", c.concurrency)
        ratio = f"{c.rps / top.rps:.2f}" if top else "-"
        bad = "/".join(str(x.non_2xx + x.errors) if x else "-" for x in (c, top, snake))
        lines.append(f"| {c.dataset} | {c.workload} | {c.concurrency} | {c.rps:,.0f} | {c.p50_ms:.2f} | "
                     f"{c.p99_ms:.2f} | {f'{top.rps:,.0f}' if top else '-'} | {ratio} | "
                     f"{f'{snake.rps:,.0f}' if snake else '-'} | {bad} |")
    workers = [c for c in cells if c.server.startswith("ours-")]
    if workers:
        lines += ["", "| dataset | workload | c | server | req/s | p50 ms | p99 ms | non-2xx |",
                  "|---|---|---:|---|---:|---:|---:|---:|"]
        lines += [f"| {c.dataset} | {c.workload} | {c.concurrency} | {c.server} | {c.rps:,.0f} | {c.p50_ms:.2f} | "
                  f"{c.p99_ms:.2f} | {c.non_2xx + c.errors} |" for c in workers]
    return "\n".join(lines)


FLOOR_WORKLOADS = {"read by id": "read", "page of 100 bodies at a random _after": "page-after",
                   "name-prefix page of 20": "name-prefix"}


def extras_table(cells: Sequence[Cell], extras: dict[str, dict[str, Any]]) -> str:
    lines = ["| dataset | server RSS MB (peak) | full walk resources/s | walked | finished |",
             "|---|---:|---:|---:|---|"]
    lines += [f"| {k} | {v['rss_mb']} ({v['peak_rss_mb']}) | {v['walk_resources_per_s']:,} | {v['walked']:,} | "
              f"{v['walk_finished']} |" for k, v in extras.items()]
    lines += ["", "One statement alone on the driver's own connection (median us), against the ceiling's whole response "
              "at c=1: a server adding nothing to the ceiling but that statement would reach the last column.", "",
              "| dataset | statement | us | ceiling us per response (c=1) | ratio reachable (c=1) |",
              "|---|---|---:|---:|---:|"]
    for name, extra in extras.items():
        for statement, us in extra.get("floor", {}).items():
            top = find(cells, name, FLOOR_WORKLOADS.get(statement, ""), "ceiling", 1)
            per = 1e6 / top.rps if top else None
            lines.append(f"| {name} | {statement} | {us} | {f'{per:.0f}' if per else '-'} | "
                         f"{f'{per / (per + us):.2f}' if per else '-'} |")
    return "\n".join(lines)


def targets(cells: Sequence[Cell], extras: dict[str, dict[str, Any]], sqlite_big: str | None, pg_big: str | None,
            pg_small: str | None) -> list[tuple[str, str, bool]]:
    """Each target checked on this run: (target, measured, met)."""
    out: list[tuple[str, str, bool]] = []
    for column, dataset in enumerate((sqlite_big, pg_big)):
        if dataset is None:
            continue
        for workload, wanted in RATIOS.items():
            ours, top = find(cells, dataset, workload, "ours", 16), find(cells, dataset, workload, "ceiling", 16)
            if ours and top:
                ratio = ours.rps / top.rps
                out.append((f"{workload}, {dataset}, c=16: >= {wanted[column]} of the ceiling", f"{ratio:.2f}",
                            ratio >= wanted[column]))
        for workload in ("read", "id-search"):
            for concurrency in (1, 16):
                ours = find(cells, dataset, workload, "ours", concurrency)
                snake = find(cells, dataset, workload, "fhirsnake", concurrency)
                if ours and snake:
                    out.append((f"{workload}, {dataset}, c={concurrency}: ahead of fhirsnake",
                                f"{ours.rps:,.0f} vs {snake.rps:,.0f} req/s", ours.rps > snake.rps))
    if pg_big and pg_small:
        for c in cells:
            if c.dataset != pg_big or c.server != "ours":
                continue
            small = find(cells, pg_small, c.workload, "ours", c.concurrency)
            if small:
                growth = c.p99_ms / small.p99_ms
                out.append((f"{c.workload} c={c.concurrency}: p99 at {pg_big} <= 2x p99 at {pg_small}",
                            f"{c.p99_ms:.2f} / {small.p99_ms:.2f} ms = {growth:.2f}x", growth <= 2.0))
    big = extras.get(pg_big or "") or extras.get(sqlite_big or "")
    if big:
        name = pg_big if pg_big in extras else sqlite_big
        out.append((f"server RSS serving {name}: <= 250 MB", f"{big['peak_rss_mb']} MB peak",
                    big["peak_rss_mb"] <= 250))
    bad = [c for c in cells if c.non_2xx or c.errors]
    out.append(("every cell: 0 non-2xx answers and 0 socket errors",
                f"{len(bad)} cells with some" if bad else "0 everywhere", not bad))
    return out


def targets_table(checks: list[tuple[str, str, bool]]) -> str:
    return "| target | measured | met |\n|---|---|---|\n" + "\n".join(
        f"| {name} | {measured} | {'yes' if met else '**no**'} |" for name, measured, met in checks)
