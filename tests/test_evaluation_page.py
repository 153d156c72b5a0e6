"""benchmarks/evaluation_page.py keeps the sections of docs/evaluation.md it does not write."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import benchmark_script

page = benchmark_script("evaluation_page.py", "evaluation_page")


def test_the_sections_written_by_hand_are_kept_and_its_own_are_not():
    old = (
        "# Evaluation figures\n\nintro\n\n## The default profile\n\nold grid\n\n## By hand\n\nkept\n\n"
        "### Its part\n\nkept too\n\n## The loops profile\n\nold loops\n\n"
        f"{page.REAL_MODEL}\n\nold real\n\n## Another by hand\n\nalso kept\n"
    )
    assert (
        page.kept_sections(old)
        == "\n## By hand\n\nkept\n\n### Its part\n\nkept too\n\n## Another by hand\n\nalso kept\n"
    )


def test_the_costly_faults_of_the_docs_are_kept():
    kept = page.kept_sections((Path(__file__).parents[1] / "docs" / "evaluation.md").read_text())
    assert kept.startswith("\n## The costly faults\n") and "### Held-out seeds 300-309" in kept
    assert "## The default profile" not in kept and page.FAULT_MODEL_HEADING not in kept
