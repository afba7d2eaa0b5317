#!/usr/bin/env python3
"""Merges several runs of `tessera bench` (or of bench/peers/pytorch_exercises.py) into one
JSON file of the same shape whose figures are per-row medians, for a quieter comparison.

    python3 bench/exercises/median.py OUT.json RUN1.json RUN2.json ...

Rows are matched by what they measure (exercise, device, n, copies, what, variant, mode);
their numeric figures become the median over the runs that have the row, and the row gains
"runs" (how many). Notes and devices come from the first run.
"""
import json
import statistics
import sys

KEY_FIELDS = ("exercise", "device", "n", "with_copy", "what", "variant", "mode")
FIGURES = ("seconds", "min_seconds", "gflops", "gbps", "seconds_per_step",
           "min_seconds_per_step", "sequential_seconds", "parallel_seconds", "scaling")


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out, paths = argv[1], argv[2:]
    runs = []
    for p in paths:
        try:
            with open(p) as f:
                runs.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"median.py: skipping {p}: {e}", file=sys.stderr)
    if not runs:
        sys.exit("median.py: no run could be read")
    merged = dict(runs[0])
    order, groups = [], {}
    for run in runs:
        for row in run.get("rows", []):
            key = tuple(json.dumps(row.get(k)) for k in KEY_FIELDS)
            if key not in groups:
                order.append(key)
                groups[key] = []
            groups[key].append(row)
    rows = []
    for key in order:
        row = dict(groups[key][0])
        for field in FIGURES:
            values = [r[field] for r in groups[key] if isinstance(r.get(field), (int, float))]
            if values:
                row[field] = statistics.median(values)
        row["runs"] = len(groups[key])
        rows.append(row)
    merged["rows"] = rows
    merged.setdefault("notes", []).append(f"figures are medians of {len(runs)} runs")
    with open(out, "w") as f:
        json.dump(merged, f, indent=1)


if __name__ == "__main__":
    main(sys.argv)
