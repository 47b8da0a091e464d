"""Issue 27's single-host goal, one verdict per size and rank count: herring at or ahead of every
peer (torch-gloo, Horovod-gloo, Open MPI, DeepSpeed's shm allreduce) from 4 KiB to 64 MiB, and
within 2x of Open MPI at 4 KiB. Both reports (docs/benchmarks.md from the full preset,
docs/benchmarks_latency.md from the latency preset) show it over the sizes their run measured.

`medians` is {(stack, np, bytes): median seconds} of the plain (no variant) allreduce records."""

from benchmarks.common.formatting import fmt_bytes, fmt_time
from benchmarks.single_host.plan import PEERS

KiB, MiB = 1 << 10, 1 << 20
MIN_SIZE, MAX_SIZE = 4 * KiB, 64 * MiB
MPI_SIZE, MPI_FACTOR = 4 * KiB, 2.0

INTRO = ("Issue 27's goal: herring at or ahead of every peer ({peers}) at every size from 4 KiB to 64 MiB "
         "at np=2 and np=4, and within 2x of Open MPI at 4 KiB. Each cell is the peer's median over "
         "herring's (at least 1.00x: herring at or ahead); `slowest` names the peer closest to herring or "
         "ahead of it. Sizes this run did not measure are not shown.")


def rows(medians, np, sizes):
    """[(size, herring seconds, {peer: ratio}, worst peer, worst ratio, met)] for the sizes in
    [MIN_SIZE, MAX_SIZE] where herring has a median."""
    out = []
    for size in sizes:
        ours = medians.get(("herring", np, size))
        if ours is None or not MIN_SIZE <= size <= MAX_SIZE:
            continue
        ratios = {p: medians[(p, np, size)] / ours for p in PEERS if (p, np, size) in medians}
        if not ratios:
            continue
        worst = min(ratios, key=ratios.get)
        out.append((size, ours, ratios, worst, ratios[worst], ratios[worst] >= 1.0))
    return out


def table(medians, nps, sizes):
    """The goal's markdown: one table over np and size, then the Open MPI 4 KiB rows and a summary."""
    peers = [p for p in PEERS if any(k[0] == p for k in medians)]
    lines = [INTRO.format(peers=", ".join(peers)) + "\n",
             "| np | Size | herring | " + " | ".join(peers) + " | slowest | at or ahead of every peer |",
             "| --- | --- | --- |" + " --- |" * len(peers) + " --- | --- |"]
    met = total = 0
    for np in nps:
        for size, ours, ratios, worst, ratio, ok in rows(medians, np, sizes):
            cells = [f"{ratios[p]:.2f}x" if p in ratios else "-" for p in peers]
            lines.append(f"| {np} | {fmt_bytes(size)} | {fmt_time(ours)} | " + " | ".join(cells)
                         + f" | {worst} {ratio:.2f}x | {'met' if ok else 'not met'} |")
            met, total = met + ok, total + 1
    lines += ["", "| np | 4 KiB: herring | Open MPI | herring / Open MPI | within 2x of Open MPI |",
              "| --- | --- | --- | --- | --- |"]
    for np in nps:
        ours, mpi = medians.get(("herring", np, MPI_SIZE)), medians.get(("mpi", np, MPI_SIZE))
        if ours and mpi:
            lines.append(f"| {np} | {fmt_time(ours)} | {fmt_time(mpi)} | {ours / mpi:.2f}x | "
                         f"{'met' if ours <= MPI_FACTOR * mpi else 'not met'} |")
    lines += ["", f"At or ahead of every peer at {met} of {total} (np, size) points measured."]
    return "\n".join(lines) + "\n"


def medians_of(results, workload="allreduce"):
    """{(stack, np, bytes): median} from a Results object (plain variant only)."""
    out = {}
    for stack in results.stacks:
        for np in results.nps:
            for size in results.values("bytes", workload=workload, np=np):
                t = results.median(workload, stack, np, bytes=size)
                if t is not None:
                    out[(stack, np, size)] = t
    return out
