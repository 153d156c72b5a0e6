"""The README's and the docs pages' code runs, their links resolve, the README's commands are the ones CI runs,
and the example script works."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A Markdown link or image to a file of the repository: `[text](target)`, `(target#anchor)`; not a web address.
LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]*)\)")


def page(name: str) -> str:
    """A docs page's text, by file name: `page("cli.md")`."""
    return (DOCS / name).read_text()


def blocks(language: str, text: str = README) -> list[tuple[str, str]]:
    return [(info, body) for lang, info, body in FENCE.findall(text) if lang == language]


def runnable_blocks(text: str = README) -> list[str]:
    return [body for info, body in blocks("python", text) if "no-run" not in info]


# The docs pages with Python to run: each runs after the README's blocks, whose names (the Quickstart's) it uses.
PAGES = [path.name for path in sorted(DOCS.glob("*.md")) if runnable_blocks(path.read_text())]
# What a page's guarded run prints: once, from the main script, never again from the workers that import it.
PRINTED_ONCE = {"tools.md": "330 m = 1082.68 ft"}


def reader_blocks(name: str) -> list[tuple[str, str]]:
    """A page's blocks as a reader runs them, each with the name a traceback gives it: the README's, then the page's."""
    named = [(f"README.md python block {number}", body) for number, body in enumerate(runnable_blocks(), 1)]
    if name != "README.md":
        named += [(f"docs/{name} python block {n}", body) for n, body in enumerate(runnable_blocks(page(name)), 1)]
    return named


def test_the_readme_and_the_docs_pages_hold_the_python_that_runs():
    assert len(runnable_blocks()) >= 2  # the Quickstart and the worst case
    assert len(PAGES) >= 9
    assert sum(len(runnable_blocks(page(name))) for name in PAGES) + len(runnable_blocks()) >= 18
    assert set(PRINTED_ONCE) <= set(PAGES)


@pytest.mark.parametrize("name", ["README.md", *PAGES], ids=lambda name: name.removesuffix(".md"))
def test_python_blocks_run_in_order(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__main__"}
    for label, body in reader_blocks(name):
        exec(compile(body, label, "exec"), namespace)


@pytest.mark.parametrize("name", ["README.md", *PAGES], ids=lambda name: name.removesuffix(".md"))
def test_python_blocks_pasted_into_one_script_run_without_a_traceback(name, tmp_path):
    """As a reader runs them: one file, run by Python, whose worker processes import it again."""
    script = tmp_path / "blocks.py"
    script.write_text("\n\n".join(body for _, body in reader_blocks(name)))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    # The guarded run once: workers import the script again (Python's rule for spawn and forkserver), and the
    # main guard keeps the run out of them.
    if name in PRINTED_ONCE:
        assert done.stdout.count(PRINTED_ONCE[name]) == 1


def test_the_readme_links_every_docs_page():
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)[#)]", README))
    assert linked == {path.name for path in DOCS.glob("*.md")}


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize(
    "path", [ROOT / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda path: path.relative_to(ROOT).as_posix()
)
def test_relative_links_resolve_to_a_file_and_a_heading(path):
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.is_file(), f"{path.name}: {target}"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", FENCE.sub("", linked.read_text()), re.MULTILINE)
            assert anchor in {_anchor(heading) for heading in headings}, f"{path.name}: {target}"


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
