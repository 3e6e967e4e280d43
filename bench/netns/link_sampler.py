#!/usr/bin/env python3
"""Samples a network interface's byte counters every 10 ms, for a look
inside one transfer (docs/results/planner-accuracy.md, finding 20).

    bench/netns/mpirun_shaped.sh ... --sample DIR -- PROGRAM   # one per rank, DIR/rank-<i>.txt
    ip netns exec lcco-0 python3 bench/netns/link_sampler.py /tmp/rank0.txt [mpi0]   # by hand

Writes `unix_seconds tx_bytes rx_bytes` lines until the interface is gone
(mpirun_shaped.sh removes the namespace after the job);
scripts/link_timeline.py lines them up with a run.
"""
import sys
import time


def main(out, dev="mpi0"):
    stats = f"/sys/class/net/{dev}/statistics/"
    with open(out, "w") as f:
        while True:
            try:
                tx = int(open(stats + "tx_bytes").read())
                rx = int(open(stats + "rx_bytes").read())
            except OSError:
                return
            f.write(f"{time.time():.4f} {tx} {rx}\n")
            f.flush()
            time.sleep(0.01)


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
