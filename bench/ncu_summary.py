#!/usr/bin/env python3
"""Kernel time table from Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum).

    python3 bench/ncu_summary.py FILE.csv [TOP] [--last-step]

Prints the total GPU time of the profiled kernels, then the TOP (default 40) kernel names by
total time: milliseconds, launches, mean microseconds and share. Kernel names are shortened to
the function name with its first template arguments, which is what tells hark's kernels apart.
With --last-step, only the kernels of a Whisper decode's last step count: those from the last
embedding launch on (hark bench --tokens N brackets the prompt and the N - 1 replayed steps).
"""
import csv
import sys
from collections import defaultdict

# Nsight Compute writes the unit of each value, short or long, in milliseconds here.
UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0,
         "s": 1e3, "second": 1e3}


def short_name(name):
    # "void ns::kernel<T, 3>(args)" -> "kernel<T, 3>"
    name = name.split("(")[0].replace("void ", "")
    head, _, rest = name.partition("<")
    head = head.split("::")[-1]
    return head + ("<" + rest[:60] if rest else "")


def main():
    arguments = [a for a in sys.argv[1:] if a != "--last-step"]
    last_step = len(arguments) < len(sys.argv) - 1
    path = arguments[0]
    top = int(arguments[1]) if len(arguments) > 1 else 40
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        print("no kernels profiled")
        return
    header = rows[0]
    name_at, metric_at, value_at = (header.index(c) for c in ("Kernel Name", "Metric Name", "Metric Value"))
    unit_at = header.index("Metric Unit")
    # (short name, ms) of each launch, in the order profiled.
    kernels = []
    for row in rows[1:]:
        if len(row) <= value_at or row[metric_at] != "gpu__time_duration.sum":
            continue
        scale = UNITS[row[unit_at]]
        kernels.append((short_name(row[name_at]), float(row[value_at].replace(",", "")) * scale))
    if last_step:
        starts = [i for i, (name, _) in enumerate(kernels) if "embed_kernel<" in name]
        if not starts:
            print("no decode step (embed_kernel) among the kernels profiled")
            return
        kernels = kernels[starts[-1]:]
        print("the last decode step:")
    totals = defaultdict(lambda: [0.0, 0])
    for name, value in kernels:
        entry = totals[name]
        entry[0] += value
        entry[1] += 1
    everything = sum(t for t, _ in totals.values())
    launches = sum(n for _, n in totals.values())
    print(f"{launches} kernels, {everything:.3f} ms of GPU time")
    for name, (ms, n) in sorted(totals.items(), key=lambda item: -item[1][0])[:top]:
        print(f"{ms:9.3f} ms {n:6d} x {1000 * ms / n:9.1f} us {100 * ms / everything:5.1f}%  {name}")


if __name__ == "__main__":
    main()
