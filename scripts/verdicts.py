#!/usr/bin/env python
"""The claims' verdicts of one or more seed blocks, side by side, read from the runs' ``summary.json``.

    python scripts/verdicts.py                   # block 0: results/<notebook>/summary.json
    python scripts/verdicts.py 0 100             # blocks 0 and 100 (results/block100/…), a markdown table
    python scripts/verdicts.py 0 100 --full      # the papers' sizes (results/full/…)
    python scripts/verdicts.py 0 100 --units 10  # the registered number of units (results/units10/…)

A verdict is every ``…reproduced`` entry of a summary (a notebook may record several, e.g. a
methods comparison's peak and final scores), shown as yes / no / tie / withheld (with the failed
preconditions). The last column says whether the blocks that gave a verdict agree (a withheld block
does not count, and fewer than two verdicts is "—"): a claim whose verdict changes with the block is
**unstable**, a property of which seeds a block draws, which no single block's result can
show (docs/preregistration.md, "Seed blocks"). Notebooks not run on a block show "—". Nothing here
computes a verdict: the notebooks do, this only reads them, so the table is the runs' own record.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def summary_path(name: str, block: int, full: bool = False, root: Path | None = None, units: int | None = None) -> Path:
    """Where ``run_notebooks.py`` (``--seed block``, ``--units N``) leaves the notebook's summary."""
    base = (root or ROOT) / "results" / ("full" if full else "") / (f"units{units}" if units else "")
    return base / (f"block{block}" if block else "") / name / "summary.json"


def verdicts(summary: dict, prefix: str = "", inside: bool = False) -> dict[str, str]:
    """Every ``…reproduced`` entry of a summary, keyed by its path (``calibration.reproduced``); a
    ``reproduced`` dict gives one entry per part (``reproduced.peak``)."""
    out: dict[str, str] = {}
    for key, value in summary.items():
        path, named = f"{prefix}{key}", inside or str(key).endswith("reproduced")
        if isinstance(value, dict):
            out.update(verdicts(value, f"{path}.", named))
        elif named and isinstance(value, str):
            out[path] = value
    return out


def short(verdict: str, brief: bool = False) -> str:
    """``withheld (…)`` for a withheld verdict (``withheld`` alone if ``brief``), else the verdict itself."""
    head = "no verdict (precondition: "
    if not verdict.startswith(head):
        return verdict
    return "withheld" if brief else f"withheld ({verdict[len(head):-1]})"


def table(blocks: list[int], full: bool = False, root: Path | None = None, brief: bool = False,
          units: int | None = None) -> list[dict]:
    """One row per (notebook, verdict entry): the verdict on each block and whether they agree."""
    root = root or ROOT
    names = sorted(p.stem for p in (root / "notebooks").glob("*.ipynb"))
    rows = []
    for name in names:
        per_block = {}
        for b in blocks:
            p = summary_path(name, b, full, root, units)
            per_block[b] = verdicts(json.loads(p.read_text())) if p.exists() else None
        keys = sorted({k for v in per_block.values() if v for k in v})
        for key in keys:
            shown = {b: (short(v[key], brief) if v and key in v else None) for b, v in per_block.items()}
            ran = [s for s in shown.values() if s is not None and not s.startswith("withheld")]
            heads = {s.split(" ")[0] for s in ran}
            agree = "—" if len(ran) < 2 else "yes" if len(heads) == 1 else "**unstable**"
            rows.append({"notebook": name, "verdict": key, "blocks": shown, "agree": agree})
    return rows


def markdown(rows: list[dict], blocks: list[int]) -> str:
    head = "| notebook | verdict | " + " | ".join(f"block {b}" for b in blocks) + " | blocks agree |"
    lines = [head, "|" + "---|" * (3 + len(blocks))]
    for r in rows:
        cells = [r["blocks"][b] if r["blocks"][b] is not None else "—" for b in blocks]
        lines.append(f"| `{r['notebook']}` | {r['verdict']} | " + " | ".join(cells) + f" | {r['agree']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("blocks", nargs="*", type=int, default=[0], help="seed blocks (default: 0)")
    ap.add_argument("--full", action="store_true", help="the papers' sizes (results/full/…)")
    ap.add_argument("--json", action="store_true", help="the rows as JSON instead of a markdown table")
    ap.add_argument("--brief", action="store_true", help="withheld verdicts without their failed preconditions")
    ap.add_argument("--units", type=int, default=None, help="runs made with run_notebooks.py --units N")
    args = ap.parse_args(argv)
    rows = table(args.blocks, args.full, ROOT, args.brief, args.units)
    if not rows:
        where = ROOT / "results" / ("full" if args.full else "") / (f"units{args.units}" if args.units else "")
        print(f"verdicts: no summary.json for blocks {args.blocks} under {where}; "
              "run `make reproduce` (SEED=N for block N, UNITS=N for N units) first", file=sys.stderr)
        return 2
    print(json.dumps(rows, indent=1) if args.json else markdown(rows, args.blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
