#!/usr/bin/env python3
"""Where one kernel's warps wait, from an Nsight Compute report of it (bench/gpu.sh, stage stalls).

    python3 bench/ncu_stalls.py RAW.csv SASS.csv [TOP]

RAW.csv: `ncu -i REPORT --page raw --csv` of a profile with the metrics
smsp__warp_issue_stalled_*_per_warp_active.pct; SASS.csv: `ncu -i REPORT --page source --csv
--print-source sass` of one with the SourceCounters section. Prints the stall reasons (share of
the active warps' cycles), then the SASS by stretches between the instructions that end one
(barriers, calls, returns, fences, sleeps, memory barriers, bulk copies), the stretches with at
least 1 % of the samples, then the TOP (default 20) instructions by samples with their leading
reasons. A warp's sample goes to the instruction it waits to issue: a wait at a barrier shows on
the instruction after it.
"""
import csv
import sys

STALL_METRIC = "smsp__warp_issue_stalled_"
STALL_SUFFIX = "_per_warp_active.pct"
# What ends a stretch of the listing: where the warps wait for each other or for memory.
MARKERS = ("BAR.SYNC", "CALL", "RET", "EXIT", "NANOSLEEP", "MEMBAR", "ERRBAR", "SYNCS",
           "UBLKCP", "UTMALDG")


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def stall_reasons(path):
    rows = list(csv.reader(open(path, newline="")))
    header = next((row for row in rows if any(STALL_METRIC in cell for cell in row)), None)
    if header is None:
        return []
    # The header, then a row of units, then the kernel's values.
    values = rows[rows.index(header) + 2]
    reasons = []
    for name, value in zip(header, values):
        if name.startswith(STALL_METRIC) and name.endswith(STALL_SUFFIX):
            share = number(value)
            if share is not None:
                reasons.append((share, name[len(STALL_METRIC):-len(STALL_SUFFIX)]))
    return sorted(reasons, reverse=True)


def sass_listing(path):
    rows = list(csv.reader(open(path, newline="")))
    header_index = next((i for i, row in enumerate(rows) if "Address" in row and "Source" in row),
                        None)
    if header_index is None:
        return []
    header = rows[header_index]
    samples = header.index("Warp Stall Sampling (All Samples)")
    source = header.index("Source")
    reasons = [(i, name[len("stall_"):]) for i, name in enumerate(header)
               if name.startswith("stall_") and "Not Issued" not in name]
    listing = []
    for row in rows[header_index + 1:]:
        if len(row) <= samples:
            continue
        count = int(number(row[samples]) or 0)
        leading = sorted(((int(number(row[i]) or 0), name) for i, name in reasons), reverse=True)
        listing.append((count, row[source].strip(), [(n, c) for c, n in leading[:3] if c > 0]))
    return listing


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    reasons = stall_reasons(sys.argv[1])
    print("stalls (% of the active warps' cycles): " +
          (", ".join(f"{name} {share:.1f}" for share, name in reasons[:12]) or "none in the report"))
    listing = sass_listing(sys.argv[2])
    if not listing:
        sys.exit("no SASS in the report: no launch matched the kernel's name, or it was not "
                 "profiled (its log says which)")
    total = sum(count for count, _, _ in listing) or 1
    print(f"{len(listing)} SASS instructions, {total} samples; stretches with 1 % or more:")
    first, stretch = 0, 0
    for index, (count, text, _) in enumerate(listing):
        stretch += count
        if any(marker in text for marker in MARKERS) or index == len(listing) - 1:
            if stretch >= 0.01 * total:
                print(f"  {first:5d}-{index:5d} {100 * stretch / total:5.1f} %  ending {text[:60]}")
            first, stretch = index + 1, 0
    print(f"the {top} instructions with the most samples (index, share, instruction, reasons, "
          "and the last of the stretch-ending instructions within 8 before it):")
    ranked = sorted(range(len(listing)), key=lambda i: -listing[i][0])[:top]
    for index in ranked:
        count, text, leading = listing[index]
        before = next((f"{i}: {listing[i][1][:36]}" for i in range(index - 1, max(-1, index - 9), -1)
                       if any(marker in listing[i][1] for marker in MARKERS)), "")
        print(f"  {index:5d} {100 * count / total:5.1f} %  {text[:40]:40s} "
              f"{' '.join(f'{n}:{c}' for n, c in leading)}  [{before}]")


if __name__ == "__main__":
    main()
