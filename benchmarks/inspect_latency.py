"""`reinloop inspect`'s page latency while a writer runs on the thread it shows.

A library process (`tests/inspect_writer.py run`) runs one thread on a SQLite file, a tool that sleeps NAP_S every
round, for ROUNDS rounds; a `reinloop inspect` server process serves that file. Once the writer has saved its
first checkpoint and WARM seconds have passed, the thread's page, its status and the thread list are each
loaded LOADS times over HTTP, one second apart (as the page's script polls; the writer adds hundreds of
checkpoints between two loads). Prints each page's wall time (median and worst) and the server's CPU time per
load (from /proc), and how many rounds the writer had saved by the end.

Run: python benchmarks/inspect_latency.py [--rounds 3000] [--nap 0.005] [--loads 8] [--warm 20]
(--warm: seconds the writer runs before the first load, so the thread has a history to read.)
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def load(url: str) -> tuple[int, float]:
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=300) as page:
            page.read()
            status = page.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return status, time.perf_counter() - began


def rounds_saved(db: Path, thread: str) -> int:
    import sqlite3

    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3000)
    parser.add_argument("--nap", type=float, default=0.005)
    parser.add_argument("--loads", type=int, default=8)
    parser.add_argument("--warm", type=float, default=20.0)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as folder:
        db, port = Path(folder) / "runs.sqlite", free_port()
        writing = ["run", str(db), "busy", str(args.rounds), str(args.nap)]
        writer = subprocess.Popen([sys.executable, "-m", "tests.inspect_writer", *writing], stdout=subprocess.PIPE,
                                  text=True, env=env)  # fmt: skip
        server = subprocess.Popen([sys.executable, "-m", "reinloop", "inspect", "--db", str(db), "--port", str(port)],
                                  stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        try:
            assert writer.stdout is not None and writer.stdout.readline().strip() == "started"
            assert server.stdout is not None and server.stdout.readline()
            time.sleep(args.warm)
            base = f"http://127.0.0.1:{port}"
            measured: dict[str, list[tuple[int, float, float]]] = {"/thread/busy": [], "/status/busy": [], "/": []}
            for _ in range(args.loads):
                for path, loads in measured.items():
                    before = cpu_s(server.pid)
                    status, wall = load(base + path)
                    loads.append((status, wall, cpu_s(server.pid) - before))
                time.sleep(1)
            running = writer.poll() is None
            saved = rounds_saved(db, "busy")
        finally:
            for process in (server, writer):
                process.kill()
                process.wait()
    print(f"writer still running at the end: {running}; checkpoints saved: {saved}")
    print(f"{'page':<14} {'status':<8} {'wall median':>12} {'wall max':>10} {'cpu median':>11} {'cpu max':>9}")
    for path, loads in measured.items():
        statuses = ",".join(sorted({str(status) for status, _, _ in loads}))
        walls, cpus = [wall for _, wall, _ in loads], [cpu for _, _, cpu in loads]
        print(f"{path:<14} {statuses:<8} {statistics.median(walls):>11.3f}s {max(walls):>9.3f}s "
              f"{statistics.median(cpus):>10.3f}s {max(cpus):>8.3f}s")  # fmt: skip


if __name__ == "__main__":
    main()
