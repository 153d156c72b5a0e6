"""A change's effect on the cost of a round, paired: two source trees of reinloop, run alternately.

Each pair runs `benchmarks/rounds.py` once on the tree before the change and once on the tree after it
(in alternating order, each in a fresh process), for the same rounds and storage; the figure is the ratio
after / before of reinloop's milliseconds per round within each pair, so noise that lasts longer than a pair
hits both sides alike. Prints the median ratio and its spread (min-max) over the pairs, the medians of both
sides, and the latest checkpoint's and the database's bytes per round; for wall time and for the process's
CPU time (every thread's), which other processes on a shared machine move less. Both trees run this
directory's `rounds.py`: only the reinloop they import differs.

Make the "before" tree with e.g. ``git archive <commit> | tar -x -C /tmp/before``.
Run: python benchmarks/paired.py BEFORE_DIR AFTER_DIR [--rounds 400] [--storage sync] [--pairs 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# One harness for both trees: only the reinloop it imports differs.
ROUNDS = Path(__file__).with_name("rounds.py")


def one_run(tree: Path, rounds: int, storage: str, only: list[str]) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, str(ROUNDS), "--rounds", str(rounds), "--storage",
                   storage, "--repeats", "1", "--only", *only, "--json", out.name]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())[0]
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--storage", default="sync", choices=["none", "sync", "async"])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--only", nargs="+", default=["reinloop"])
    args = parser.parse_args()
    sides: dict[str, dict[str, list[float]]] = {"before": {"wall": [], "cpu": []}, "after": {"wall": [], "cpu": []}}
    sizes: dict[str, dict[str, float]] = {}
    ratios: dict[str, list[float]] = {"wall": [], "cpu": []}
    for pair in range(args.pairs):
        order = [("before", args.before), ("after", args.after)]
        for side, tree in order if pair % 2 == 0 else order[::-1]:
            result = one_run(tree, args.rounds, args.storage, args.only)
            sides[side]["wall"].append(statistics.median(result["times"]["reinloop"]))
            sides[side]["cpu"].append(statistics.median(result["cpu"]["reinloop"]))
            sizes[side] = result["sizes"].get("reinloop", {})
        for kind, values in ratios.items():
            values.append(sides["after"][kind][-1] / sides["before"][kind][-1])
        wall = {side: values["wall"][-1] for side, values in sides.items()}
        print(f"pair {pair + 1}: wall ms before {wall['before']:.3f}, after {wall['after']:.3f}, ratio "
              f"{ratios['wall'][-1]:.3f}; CPU ratio {ratios['cpu'][-1]:.3f}", flush=True)  # fmt: skip
    print(f"{args.rounds} rounds, storage {args.storage}, {args.pairs} pairs, after / before, median (min-max):")
    for kind, values in ratios.items():
        before, after = (statistics.median(sides[side][kind]) for side in ("before", "after"))
        print(f"  {kind:>4}: {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}); ms per round "
              f"before {before:.3f}, after {after:.3f}")  # fmt: skip
    for side, measured in sizes.items():
        if measured:
            print(f"{side}: latest checkpoint {measured['ckpt']:.0f} B, database {measured['db_per_round']:.0f} B "
                  "per round")  # fmt: skip


if __name__ == "__main__":
    main()
