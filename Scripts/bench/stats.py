"""The benchmarks' statistics, one copy for every script in Scripts/bench: the median, min and max of
repeated runs, the ratio of two series, and the two ways the tables print them.

The bench scripts' summaries import it (`PYTHONPATH="$root/Scripts/bench" python3 - … <<'PY'`, then
`from stats import …`), as do bench-proxy-*.py (their own folder is on sys.path); a shell pipeline
takes the lower median of whitespace-separated numbers on stdin with

    python3 Scripts/bench/stats.py lower-median

`median` is statistics.median: of an even count, the mean of the two middle values. `lower_median`
is the middle value taken from below (the ((n+1)/2)-th of the sorted values, as `sort -g` and that
line gave it), printed exactly as it was read. Scaling (seconds to ms) happens where each script
did it before, so every figure prints as it did: `median_range` scales the statistics, callers of
`min_median_max` and `run_ratios` scale the values they pass.
"""

import statistics
import sys

median = statistics.median


def spread(values):
    """(min, median, max) of a series of runs."""
    values = sorted(values)
    return values[0], statistics.median(values), values[-1]


def median_range(values, fmt="{:,.0f}", scale=1.0, unit="", dash="-"):
    """`MEDIAN[unit] (MIN-MAX)`, each scaled, then formatted with fmt: `12,345 (12,001-12,800)`."""
    low, mid, high = spread(values)
    return f"{fmt.format(mid * scale)}{unit} ({fmt.format(low * scale)}{dash}{fmt.format(high * scale)})"


def min_median_max(values, fmt="{:.2f}"):
    """`MIN/MEDIAN/MAX`, each formatted with fmt: `0.91/0.95/0.99`."""
    return "/".join(fmt.format(v) for v in spread(values))


def ratio_range(ours, peer):
    """Ours over the peer's: (ratio of the medians, worst pairing min/max, best pairing max/min)."""
    return statistics.median(ours) / statistics.median(peer), min(ours) / max(peer), max(ours) / min(peer)


def run_ratios(ours, peer):
    """Run by run, ours over the peer's (the two series in the same order of runs)."""
    return [a / b for a, b in zip(ours, peer)]


def lower_median(tokens):
    """The lower median of numbers given as text, returned as given (not reformatted)."""
    ordered = sorted(tokens, key=lambda token: (float(token), token))
    return ordered[(len(ordered) - 1) // 2]


if __name__ == "__main__":
    if sys.argv[1:] != ["lower-median"]:
        sys.exit("usage: stats.py lower-median   (numbers on stdin, separated by white space)")
    tokens = sys.stdin.read().split()
    if not tokens:
        sys.exit("stats.py lower-median: no numbers on stdin")
    print(lower_median(tokens))
