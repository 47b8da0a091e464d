"""docs/reliability.md is written by hand except for its tables of figures, which the scripts that
measure them regenerate: each lives between `<!-- NAME:begin -->` and `<!-- NAME:end -->`, and the
raw figures are kept under the key NAME in benchmarks/results/reliability.json (beside the other
raw results, so that docs/ holds only pages)."""

import json
import os

from benchmarks.common.doc_markers import replace_between

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "reliability.md")
FIGURES = os.path.join(ROOT, "benchmarks", "results", "reliability.json")


def load_figures():
    if os.path.exists(FIGURES):
        with open(FIGURES) as f:
            return json.load(f)
    return {}


def save_figures(name, value):
    figures = load_figures()
    figures[name] = value
    tmp = FIGURES + ".tmp"
    with open(tmp, "w") as f:
        json.dump(figures, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, FIGURES)


def replace_section(name, markdown):
    """Replaces the text between the markers of section NAME in docs/reliability.md."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    with open(DOC) as f:
        text = replace_between(f.read(), begin, end, markdown.strip("\n"))
    if text is None:
        raise RuntimeError(f"{DOC} has no section markers {begin} ... {end}")
    tmp = DOC + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, DOC)


def cell(text, limit=300):
    """Text fit for a Markdown table cell."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."
