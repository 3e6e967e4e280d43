"""Each method's training loss at the baseline's final token count.

    python3 scripts/equal_tokens.py docs/results/acco-8w-equal-tokens/curves.csv zero1

Reads the curves.csv written by `lowcomm compare` (method,step,tokens,wall_s,loss),
smooths each curve with the same 10-round moving average as the compare table,
and prints, for every method, the smoothed loss at the first round whose token
count reaches the baseline's final one, and its ratio to the baseline's.
"""
import csv
import sys
from collections import defaultdict

W = 10


def smooth(xs):
    return [sum(xs[max(0, i - W + 1):i + 1]) / (i - max(0, i - W + 1) + 1) for i in range(len(xs))]


def main():
    path, base = sys.argv[1], sys.argv[2]
    curves = defaultdict(list)
    for row in csv.DictReader(open(path)):
        curves[row["method"]].append((int(row["tokens"]), float(row["loss"])))
    tokens_base = curves[base][-1][0]
    loss_base = smooth([l for _, l in curves[base]])[-1]
    print(f"baseline {base}: {tokens_base} tokens, smoothed loss {loss_base:.4f}")
    print("| method | loss at that token count | vs baseline |")
    print("|---|---|---|")
    for m, pts in curves.items():
        sm = smooth([l for _, l in pts])
        at = next((s for (t, _), s in zip(pts, sm) if t >= tokens_base), None)
        if at is None:
            print(f"| {m} | (ends at {pts[-1][0]} tokens) | - |")
        else:
            print(f"| {m} | {at:.4f} | {100 * (at / loss_base - 1):+.2f}% |")


if __name__ == "__main__":
    main()
