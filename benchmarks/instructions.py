"""Instructions per round, counted by valgrind's callgrind: a change's effect that machine noise cannot move.

On a shared machine CPU time moves by 10-50% from one run to the next (the neighbours' load, where the scheduler
puts the tool's thread); the instructions a round executes do not. For each source tree this runs
`benchmarks/rounds.py`'s reinloop (or create_agent, or the topology floor) for two round counts under callgrind,
counting only while the run is on the stack of the thread that invokes the agent (the tool's worker thread is
not counted, nor the imports and warm-up before), with hash randomization off, and prints the slope
(instructions per round, the build excluded) and the intercept (the build of the agent and the rest of a run's
fixed cost), and each tree's slope against the first's. Instructions are not time: a cache miss or a system call
counts as little as an add, so a lever that saves instructions shows as CPU time only where it is paired.

Needs valgrind (Debian: `apt-get install valgrind`); about a minute per run, and the runs go two at a time.
Run: python benchmarks/instructions.py TREE [TREE ...] [--agent reinloop] [--rounds 20 60]
(a tree is a directory holding `reinloop/`, e.g. ``git archive <commit> | tar -x -C /tmp/before``; `.` for this one)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The C function the run is called through: collection is on exactly while it is on the stack.
TOGGLE = "_operator_call"


def child(agent: str, rounds: int) -> None:
    """The counted process: warm imports and caches, then one run of `rounds` rounds through `operator.call`."""
    import gc
    import operator

    sys.path.insert(0, str(HERE))
    from rounds import RUNS

    run = RUNS[agent]
    for _ in range(2):
        run(3, None, None)
    gc.collect()
    operator.call(run, rounds, None, None)


def count(tree: Path, agent: str, rounds: int) -> int:
    """Instructions of one counted run of `rounds` rounds on `tree`'s reinloop."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
                   f"--toggle-collect={TOGGLE}", sys.executable, __file__, "--child", agent, str(rounds)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        found = re.search(r"^summary: (\d+)$", out.read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError(f"callgrind counted nothing for {tree} ({agent}, {rounds} rounds)")
        return int(found.group(1))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--agent", default="reinloop", choices=["reinloop", "create_agent", "floor-topology"])
    parser.add_argument("--rounds", nargs=2, type=int, default=[20, 60])
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    low, high = sorted(args.rounds)
    jobs = [(tree, rounds) for tree in args.trees for rounds in (low, high)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count(job[0], args.agent, job[1]), jobs), strict=True))
    first = None
    print(f"{args.agent}: instructions of the invoking thread, {low} and {high} rounds")
    for tree in args.trees:
        slope = (counts[tree, high] - counts[tree, low]) / (high - low)
        intercept = counts[tree, low] - slope * low
        first = first or slope
        print(f"  {tree!s:32} {slope / 1e6:8.3f} M per round ({slope / first:.3f}x the first), "
              f"{intercept / 1e6:7.1f} M fixed")  # fmt: skip


if __name__ == "__main__":
    main()
