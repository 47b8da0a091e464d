"""A benchmark's page: its results JSON and the markdown page made from them, written the same way
by every benchmark so that a change to where or how pages are written is made once."""

import argparse
import json
import os

from benchmarks.common.paths import DOCS_DIR


def machine_line(machine, load):
    """The results' `machine` line: CPU, cores, date, hvd_herring's version and the load (text)."""
    return (f"{machine['cpu']}, {machine['cores']} cores, {machine['date']}, hvd_herring "
            f"{machine['versions']['hvd_herring']}, load {load}")


def write_results_and_page(results, out, title, section, page_name):
    """Writes `results` to `out` and `# title` + section(results) to docs/`page_name`; prints the page."""
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    page = f"# {title}\n\n" + section(results)
    with open(os.path.join(DOCS_DIR, page_name), "w") as f:
        f.write(page)
    print(page)


def with_failed_launches(parts, launches, describe):
    """The section's text: its parts, then a list of the launches that failed (when any did);
    describe(launch) says which launch and why."""
    failed = [launch for launch in launches if not launch["ok"]]
    if failed:
        parts = parts + ["### Launches that failed\n"] + [f"- {describe(launch)}" for launch in failed] + [""]
    return "\n".join(parts)


def report_main(argv, description, preset, page_name, title, section):
    """The command line of a report made from a preset's results JSON: writes `# title` +
    section(data, page's folder, img_dir) to the page and prints where it went."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help=f"the {preset} preset's results JSON")
    p.add_argument("--out", default=os.path.join(DOCS_DIR, page_name))
    p.add_argument("--img-dir", default=os.path.join(DOCS_DIR, "img"))
    args = p.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    out = os.path.abspath(args.out)
    with open(out, "w") as f:
        f.write(f"# {title}\n\n" + section(data, os.path.dirname(out), os.path.abspath(args.img_dir)))
    print(out)
