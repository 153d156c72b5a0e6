"""The README's code runs, its commands are the ones CI runs, and the example script works."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(language: str) -> list[tuple[str, str]]:
    return [(info, body) for lang, info, body in FENCE.findall(README) if lang == language]


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runnable = [body for info, body in blocks("python") if "no-run" not in info]
    assert len(runnable) >= 6
    namespace: dict = {"__name__": "readme"}
    for number, body in enumerate(runnable, 1):
        exec(compile(body, f"README.md python block {number}", "exec"), namespace)


def test_ci_runs_the_readme_test_command():
    commands = [body.strip() for _, body in blocks("bash")]
    main_command, test_command = commands[0], commands[1]
    assert "reinloop run" in main_command
    assert test_command in (ROOT / ".ci" / "run").read_text()
    script = (ROOT / test_command.split()[-1]).read_text()
    assert ".venv/bin/python -m pytest" in script and "apt-get install" in script


def test_the_example_script_runs():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "final answer: '2 + 3 = 5' (answered, 4 rounds)" in done.stdout
