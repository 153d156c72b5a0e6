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


def runnable_blocks() -> list[str]:
    runnable = [body for info, body in blocks("python") if "no-run" not in info]
    assert len(runnable) >= 6
    return runnable


def test_readme_python_blocks_run_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    for number, body in enumerate(runnable_blocks(), 1):
        exec(compile(body, f"README.md python block {number}", "exec"), namespace)


def test_readme_python_blocks_pasted_into_one_script_run_without_a_traceback(tmp_path):
    """As a reader runs them: one file, run by Python, whose worker processes import it again."""
    script = tmp_path / "readme_blocks.py"
    script.write_text("\n\n".join(runnable_blocks()))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    # The guarded run once: workers import the script again (Python's rule for spawn and forkserver), and the
    # main guard keeps the run out of them.
    assert done.stdout.count("330 m = 1082.68 ft") == 1


def test_ci_runs_the_readme_test_command():
    commands = [body.strip() for _, body in blocks("bash")]
    main_command, test_command = commands[0], commands[1]
    assert main_command.startswith("bash scripts/run.sh ")
    run_script = (ROOT / "scripts" / "run.sh").read_text()
    assert 'exec .venv/bin/reinloop run "$@"' in run_script and "apt-get install" in run_script
    assert test_command in (ROOT / ".ci" / "run").read_text()
    script = (ROOT / test_command.split()[-1]).read_text()
    assert ".venv/bin/python -m pytest" in script and "apt-get install" in script


def test_the_example_script_runs():
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "final answer: '2 + 3 = 5' (answered, 4 rounds)" in done.stdout
