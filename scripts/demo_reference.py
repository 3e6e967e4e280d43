"""bloc97/DeMo's own optimizer on a problem small enough to pin in a test.

Runs `DeMo` from bloc97/DeMo's `demo.py` (commit 0e48145) on 3 CPU
processes (gloo) for 3 steps: one 8 x 8 tensor (chunk 4: four 4 x 4 DCT
blocks) and one tensor of 6 (chunk 4: two runs of 3), top-2 per chunk,
compression_decay 0.9, weight decay 0.05, lr 0.1, with the gradients
below (exact in f32). Prints the parameters after each step (every worker
holds the same; worker 0's are printed) as Rust arrays, which
`src/strategy/detonation/tests/reference.rs` pins our DeMo step to.

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch einops numpy
    # bloc97/DeMo at 0e48145, e.g. git clone + git checkout 0e48145
    /tmp/torchenv/bin/python scripts/demo_reference.py /path/to/DeMo/demo.py
"""

import importlib.util
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD, STEPS = 3, 3
SHAPES = [(8, 8), (6,)]


def grad(w, t, i):
    """Worker w's gradient at step t (from 0), element i of the flat model: k / 8, k in -8..8 (a hash)."""
    h = ((i + 1) * 2654435761 + (w + 1) * 40503 + (t + 1) * 9973) % 2**32
    return ((h >> 11) % 17 - 8) / 8.0


def init(i):
    return (i % 5 - 2) / 4.0


def worker(rank, demo_py, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    spec = importlib.util.spec_from_file_location("demo", demo_py)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    params, at = [], 0
    for shape in SHAPES:
        n = 1
        for s in shape:
            n *= s
        params.append(torch.nn.Parameter(torch.tensor([init(at + i) for i in range(n)], dtype=torch.float32).view(shape)))
        at += n
    opt = demo.DeMo(params, compression_decay=0.9, compression_topk=2, compression_chunk=4, weight_decay=0.05, lr=0.1)
    rows = []
    for t in range(STEPS):
        at = 0
        for p in params:
            n = p.numel()
            p.grad = torch.tensor([grad(rank, t, at + i) for i in range(n)], dtype=torch.float32).view(p.shape)
            at += n
        # No ties at the top-k boundary, so the reference's choice is unique.
        for p in params:
            x = opt.compress.compress(opt.transform.encode(opt.demo_state[p]["delta"] * 0.9 + 0.1 * p.grad), 10**9)[1]
            x = x.abs().sort(dim=-1, descending=True).values
            assert (x[..., 1] - x[..., 2]).abs().min() > 1e-4 if x.shape[-1] > 2 else True
        opt.step()
        rows.append(torch.cat([p.detach().flatten() for p in params]).tolist())
    if rank == 0:
        with open(out, "w") as f:
            for t, r in enumerate(rows):
                # numpy's shortest repr of each f32: it parses back to the same f32.
                f.write(f"    // after step {t + 1}\n    [" + ", ".join(str(np.float32(v)) for v in r) + "],\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    out = "/tmp/demo_reference.txt"
    mp.spawn(worker, args=(sys.argv[1], out), nprocs=WORLD)
    print(open(out).read(), end="")
