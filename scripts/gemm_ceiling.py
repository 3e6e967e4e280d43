"""How fast the best BLAS libraries on this machine run the bench step's products.

Issue 13 asks lowcomm's step to be >= 1.3x PyTorch eager. Most of a step is
the linear layers' matrix products, so the bar can only be met if those run
well above what eager's own BLAS gets, or if everything else in the step
costs nearly nothing. This script times the same products as
`examples/bench_linear.rs` (per layer: forward, dX, dW; at the
`lowcomm bench` shapes) in Intel MKL through `torch.matmul`, and in
OpenBLAS through numpy when numpy is installed, on the threads eager uses.
It prints each product's GFLOP/s and the step's products summed at that
library's rates: the time a step that did nothing but multiply would take,
and the tokens/s that bounds.

    .venv-torch/bin/python scripts/gemm_ceiling.py [ROUNDS=15] [PRESETS=micro,small]
    # OpenBLAS too: .venv-torch/bin/pip install numpy  (numpy's wheel bundles it)

Compare with `cargo run --release --example bench_linear 9 small` (gemm,
as lowcomm runs it) in the same minutes; the machine is shared and noisy.
"""

import sys
import time

import torch

# The `lowcomm bench` shapes (src/bench/mod.rs `bench_shape`, src/model/config.rs):
# batch, context, width, layers, vocabulary.
SHAPES = {
    "micro": dict(batch=16, ctx=128, c=256, layers=4, vocab=4096),
    "small": dict(batch=8, ctx=256, c=512, layers=6, vocab=4096),
}


def products(s):
    """(name, calls per step, [m, k] x [k, n]) of every product in one step."""
    n, c = s["batch"] * s["ctx"], s["c"]
    out = []
    for name, cin, cout, calls in [
        ("qkv", c, 3 * c, s["layers"]),
        ("attn-proj", c, c, s["layers"]),
        ("fc", c, 4 * c, s["layers"]),
        ("fc-proj", 4 * c, c, s["layers"]),
        ("lm-head", c, s["vocab"], 1),
    ]:
        # Forward Y = X W^T, backward dX = dY W and dW = dY^T X (torch's nn.Linear).
        out.append((f"{name} fwd", calls, (n, cin, cout)))
        out.append((f"{name} dX", calls, (n, cout, cin)))
        out.append((f"{name} dW", calls, (cout, n, cin)))
    return out


def median_seconds(run, rounds):
    run()  # first touch of the output, the library's buffers
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def torch_product(m, k, n):
    # The right operand read transposed, as the forward reads its weight [out, in]; the
    # backward's products are timed in the same layout (eager's dY^T / W views may differ).
    a, b, out = torch.rand(m, k), torch.rand(n, k).t(), torch.empty(m, n)
    return lambda: torch.matmul(a, b, out=out)


def numpy_product(np):
    def make(m, k, n):
        a = np.random.rand(m, k).astype(np.float32)
        b = np.random.rand(n, k).astype(np.float32).T
        out = np.empty((m, n), np.float32)
        return lambda: np.matmul(a, b, out=out)

    return make


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    presets = (sys.argv[2] if len(sys.argv) > 2 else "micro,small").split(",")
    libs = [(f"MKL (torch {torch.__version__})", torch_product)]
    try:
        import numpy as np

        libs.append((f"OpenBLAS (numpy {np.__version__})", numpy_product(np)))
    except ImportError:
        print("numpy not installed: MKL only (pip install numpy for OpenBLAS)")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{torch.get_num_threads()} threads, load average {' '.join(load)}, median of {rounds}\n")
    for preset in presets:
        s = SHAPES[preset]
        tokens = s["batch"] * s["ctx"]
        rows = products(s)
        print(f"| {preset}: product [m x k] x [k x n] | calls | " + " | ".join(f"{name} GFLOP/s" for name, _ in libs) + " |")
        print("|---|---|" + "---|" * len(libs))
        step_s = [0.0] * len(libs)
        for name, calls, (m, k, n) in rows:
            cells = []
            for i, (_, make) in enumerate(libs):
                sec = median_seconds(make(m, k, n), rounds)
                step_s[i] += calls * sec
                cells.append(f"{2 * m * k * n / sec / 1e9:.0f}")
            print(f"| {name} [{m}x{k}]x[{k}x{n}] | {calls} | " + " | ".join(cells) + " |")
        flop = sum(calls * 2 * m * k * n for _, calls, (m, k, n) in rows)
        for (lib, _), sec in zip(libs, step_s):
            print(
                f"\n{preset}, {lib}: the step's products ({flop / 1e9:.0f} GFLOP) take {sec * 1e3:.0f} ms "
                f"({flop / sec / 1e9:.0f} GFLOP/s): a step of nothing else would run {tokens / sec:.0f} tok/s"
            )
        print()


if __name__ == "__main__":
    main()
