#!/usr/bin/env bash
# async_server_wait.sh - async DiLoCo over shaped links with its parameter
# server as a third rank on the workers' two cores, run by two binaries:
# one whose receives yield between probes (lowcomm before the change that
# added this script) and one whose receives sleep once they have waited
# (comm/mpi/mod.rs, Wait::for_receive). Finding 6 of
# docs/results/planner-accuracy.md: a yielding server took its share of the
# cores and made the workers' micro-batches 1.6x slower. Run as root:
#
#   OLD=/path/to/old/lowcomm bash bench/netns/async_server_wait.sh     # ~3 min
#   OUT=docs/results/planner-accuracy/whole bash bench/netns/async_server_wait.sh   # the current binary only
#   OLD=/path/to/old/lowcomm OLD_AS=real-async-concurrent OUT=... bash bench/netns/async_server_wait.sh
#
# Writes OUT/<setting>/real-async (the current binary, what the accuracy
# table reads) and, with OLD set, OUT/<setting>/$OLD_AS (OLD; default
# real-async-yield), one after the other per setting, on a quiet machine.
# Finding 12 ran it without OLD into whole/ after receives began counting a
# message once all its bytes had come (comm/mpi/fabric.rs); finding 14 with
# OLD_AS=real-async-concurrent into serial/, the server's models sent one
# at a time against the binary before.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/results/planner-accuracy}
SETTINGS=${SETTINGS:-"100mbit 20mbit 50mbit:50"}
OLD=${OLD:-}
OLD_AS=${OLD_AS:-real-async-yield}
cargo build --release --locked --features mpi -q
B=$PWD/target/release/lowcomm
export RAYON_NUM_THREADS=1
common=(--workers 2 --methods async-diloco:h=12 --preset nano --steps 48 --batch-size 16 --eval-every 0 --fresh)
for setting in $SETTINGS; do
    rate=${setting%%:*}
    jitter=0
    [[ $setting != *:* ]] || jitter=${setting#*:}
    dir=$OUT/$rate
    [[ $jitter == 0 ]] || dir=$OUT/$rate-jitter$jitter
    pairs=("$B:real-async")
    [[ -z $OLD ]] || pairs=("$OLD:$OLD_AS" "$B:real-async")
    for pair in "${pairs[@]}"; do
        echo "== $dir/${pair##*:}" >&2
        bench/netns/mpirun_shaped.sh --ranks 3 --rate "$rate" --jitter "$jitter" --prefix lcpa -- \
            "${pair%%:*}" compare --backend mpi "${common[@]}" --results "$dir/${pair##*:}" >/dev/null
    done
done
