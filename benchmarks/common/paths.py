"""Where the benchmarks read and write. The committed results live in benchmarks/results/ and the
pages made from them in docs/; a run pointed anywhere else keeps its report beside its results,
so a trial run never overwrites the published pages."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS_DIR = os.path.join(ROOT, "docs")
IMG_DIR = os.path.join(DOCS_DIR, "img")
RESULTS_DIR = os.path.join(ROOT, "benchmarks", "results")
# The scripts that run inside the ranks (launched by path, not imported as a package).
WORKERS_DIR = os.path.join(ROOT, "benchmarks", "workers")


def _inside(path, folder):
    return os.path.commonpath([os.path.abspath(path), folder]) == folder


def report_dir_for(results_path):
    """Where the pages made from these results go: docs/ for the committed results, else the
    results' own folder."""
    return DOCS_DIR if _inside(results_path, RESULTS_DIR) else os.path.dirname(os.path.abspath(results_path))


def results_dir_for(report_path):
    """The other direction: where the results behind a report in this folder are."""
    return RESULTS_DIR if _inside(report_path, DOCS_DIR) else os.path.dirname(os.path.abspath(report_path))


def shown(path):
    """A path as the reports print it: relative to the repository when inside it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return os.path.abspath(path) if rel.startswith("..") else rel
