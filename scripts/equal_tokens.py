"""Each method's training loss at the same token count: the smallest final
token count of all methods (so every curve reaches it).

    python3 scripts/equal_tokens.py docs/results/acco-8w-equal-tokens/curves.csv zero1

Reads the curves.csv written by `lowcomm compare` (method,step,tokens,wall_s,loss),
smooths each curve with the same 10-round moving average as the compare table,
and prints, for every method, the smoothed loss at the first round whose token
count reaches that point, and its ratio to the baseline's there.
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
    tokens_at = min(pts[-1][0] for pts in curves.values())

    def loss_at(pts):
        sm = smooth([l for _, l in pts])
        return next(s for (t, _), s in zip(pts, sm) if t >= tokens_at)

    loss_base = loss_at(curves[base])
    print(f"at {tokens_at} tokens (the smallest final count); baseline {base}: smoothed loss {loss_base:.4f}")
    print("| method | loss at that token count | vs baseline |")
    print("|---|---|---|")
    for m, pts in curves.items():
        at = loss_at(pts)
        print(f"| {m} | {at:.4f} | {100 * (at / loss_base - 1):+.2f}% |")


if __name__ == "__main__":
    main()
