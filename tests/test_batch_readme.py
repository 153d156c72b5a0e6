"""The README's two `reinloop batch` commands, run as written (in a scratch folder holding the example tasks): on
one machine with no set-up (SQLite, the embedded model) and on a local Ray cluster over PostgreSQL."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.test_readme import ROOT, blocks

COMMANDS = [body.strip() for _, body in blocks("bash") if "reinloop batch" in body]


def test_the_readme_has_a_batch_command_in_process_and_one_on_ray():
    assert len(COMMANDS) == 2
    assert "--ray" not in COMMANDS[0] and "--ray" in COMMANDS[1] and "postgresql://" in COMMANDS[1]


@pytest.mark.parametrize("command", COMMANDS, ids=["in-process", "ray"])
def test_a_readme_batch_command_runs(command, tmp_path, postgres_url):
    pytest.importorskip("llama_cpp")
    if "--ray" in command:
        pytest.importorskip("ray")
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "batch_tasks.jsonl", tmp_path / "examples")
    args = shlex.split(command)
    assert args[0] == ".venv/bin/reinloop"
    if "--ray" in command:  # a thread prefix of its own, so that a run of this test starts afresh
        args += ["--thread-prefix", f"readme-{tmp_path.name}:"]
    done = subprocess.run([sys.executable, "-m", "reinloop", *args[1:], "--quiet"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    results = tmp_path / "examples" / "batch_tasks.results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["add", "mul", "sub"], done.stderr
    # The tiny embedded model does not solve every task; every run ends with a typed reason, none in an error.
    assert all(r["finish_reason"] not in ("error", "waiting_for_approval") for r in records), records
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])["summary"]
    assert summary["ran"] == 3
