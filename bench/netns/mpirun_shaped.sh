#!/usr/bin/env bash
# mpirun_shaped.sh - run an MPICH (hydra) job with ONE RANK PER NETWORK
# NAMESPACE, the namespaces joined by veth pairs on a bridge and every link
# shaped in both directions with `tc ... tbf`, so MPI traffic really crosses
# a rate-limited TCP link (netem is not available on this kernel).
#
# Usage (as root):
#   bench/netns/mpirun_shaped.sh --ranks 2 --rate 100mbit [--prefix lcnet] -- <program> [args...]
#   bench/netns/mpirun_shaped.sh --ranks 2 --rate 50mbit --jitter 50 -- <program> [args...]
#   bench/netns/mpirun_shaped.sh --help
#
# Topology (all addresses live only inside the namespaces; the root namespace
# gets no address, route or interface):
#
#   <prefix>-hub : bridge br0 with 10.77.0.1/24 (mpiexec runs here),
#                  hub-side veth r<i> per rank, tbf on its egress (hub -> rank i)
#   <prefix>-<i> : veth mpi0 with 10.77.0.(10+i)/24, tbf on its egress (rank i -> hub)
#
# How TCP is forced: hydra's "ssh" launcher is replaced by a generated
# wrapper (run_job) that runs each proxy in its rank's namespace, with
# UCX_TLS=tcp,self, UCX_NET_DEVICES=mpi0 and MPIR_CVAR_NOLOCAL=1 (why each:
# bench/netns/README.md), the caller's environment passed too (-genvall).
# After the job, the script prints each rank's veth tx/rx bytes (the traffic
# crossed the shaped links), its TCP retransmits and its tbf queues' drops;
# --sample DIR records each rank's byte counters every 10 ms during it.
#
# Jitter (--jitter PCT[,PERIOD_MS]): netem (delay, jitter, loss) is not built
# into this kernel; only tbf, htb and pfifo are. So the jitter here is in
# BANDWIDTH: every PERIOD_MS (default 100) each shaped qdisc is changed to its
# own rate drawn uniformly from RATE x [1 - PCT/100, 1 + PCT/100]. The mean
# rate is RATE; a transfer's mean time is longer than at RATE (1/rate is
# convex), which is what `lowcomm calibrate` is there to measure.
#
# tbf parameters: burst = max(32kbit, 1 ms at the rate), latency 400ms;
# what they deliver (TCP streams, MPI all-reduces on 2 and 4 ranks, eager
# against rendezvous): bench/netns/README.md. In short, 2 ranks reach ~95% of
# the rate; 4 ranks on 2 cores with the rendezvous protocol about half
# (--eager helps).

set -Eeuo pipefail

# ---------------------------------------------------------------- constants
readonly SUBNET=10.77.0          # /24 used inside the namespaces only
readonly HUB_IP=$SUBNET.1        # bridge address, where mpiexec listens
readonly RANK_IP_BASE=10         # rank i gets $SUBNET.$((RANK_IP_BASE + i))
readonly RANK_IF=mpi0            # same name in every rank namespace -> one UCX_NET_DEVICES
readonly BRIDGE=br0
readonly MAX_RANKS=200

# ---------------------------------------------------------------- state (for cleanup)
prog=$(basename "$0")
here=$(cd "$(dirname "$0")" && pwd)
created_ns=()        # namespaces this run created, deleted on exit
tmpdir=""            # hostfile + launcher wrapper
launcher_pid=""      # background mpiexec, killed on interrupt
job_rc=0             # the MPI job's exit status = ours

# ---------------------------------------------------------------- options
ranks=""
rate=""
prefix=lcnet
burst=""             # empty = derive from rate
latency=400ms
timeout_s=0
guard_s=2            # finalize_guard.c watchdog delay; 0 = off
eager=0              # 1 = UCX_RNDV_THRESH=inf
jitter=0             # percent of the rate; 0 = a steady rate
jitter_ms=100        # how often the rates are redrawn
jitter_pid=""        # background loop that redraws them
sample_dir=""        # --sample: where each rank's link counters go
sampler_pids=()      # link_sampler.py per rank
do_cleanup=0
cmd=()

usage() {
    cat <<EOF
Usage: $prog --ranks N --rate RATE [options] -- PROGRAM [ARGS...]
       $prog --cleanup [--prefix P]

Run PROGRAM under MPICH hydra with one rank per network namespace; every
rank's veth link is shaped in both directions with tc tbf. Must run as root.

  --ranks N        number of MPI ranks = namespaces (1..$MAX_RANKS)
  --rate RATE      link rate per direction, e.g. 100mbit, 1gbit, 500kbit,
                   or 'none' for unshaped veths (comparison baseline)
  --prefix P       namespace name prefix (default: $prefix); creates P-hub, P-0, P-1, ...
  --burst B        tbf burst (default: max(32kbit, 1 ms at RATE))
  --latency L      tbf latency (default: $latency)
  --timeout S      kill the MPI job after S seconds (default: 0 = never)
  --jitter PCT[,MS]
                   bandwidth jitter: every MS milliseconds (default $jitter_ms) each
                   shaped link direction gets a rate drawn uniformly from
                   RATE x [1-PCT/100, 1+PCT/100] (netem, for delay jitter, is not
                   in this kernel); PCT in 1..90
  --sample DIR     sample each rank's link (tx/rx bytes) every 10 ms into
                   DIR/rank-<i>.txt for the whole job (bench/netns/link_sampler.py;
                   scripts/link_timeline.py lines it up with a run)
  --eager          set UCX_RNDV_THRESH=inf (eager protocol for every size). With
                   more ranks than cores, the rendezvous handshakes wait for
                   descheduled peers; eager keeps the shaped link busier
  --finalize-guard S
                   LD_PRELOAD finalize_guard.c (built with mpicc on the fly) to
                   get around the MPICH 4.0.2 + UCX TCP hang in MPI_Finalize
                   with >= 4 ranks: ranks parked in the final PMI barrier for
                   S seconds shut down their TCP sockets (default: $guard_s; 0 = off)
  --cleanup        delete leftover namespaces P-* from a crashed run and exit
  -h, --help       this help

Addresses: hub bridge $HUB_IP/24, rank i = $SUBNET.(${RANK_IP_BASE}+i)/24 on
interface $RANK_IF. Forced into every rank's environment:
  UCX_TLS=tcp,self UCX_NET_DEVICES=$RANK_IF MPIR_CVAR_NOLOCAL=1
  MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 (unless already set)
  LD_PRELOAD=<tmp>/libfinalize_guard.so (unless --finalize-guard 0)
The rest of the caller's environment is passed too (-genvall).
Exit status: the MPI job's (124 on --timeout, 130/143 on INT/TERM).
EOF
}

die() { echo "$prog: error: $*" >&2; exit 2; }
log() { echo "[$prog] $*" >&2; }

parse_args() {
    while [[ $# -gt 0 ]]; do
        case $1 in
            --ranks)    ranks=${2:?--ranks needs a value}; shift 2 ;;
            --rate)     rate=${2:?--rate needs a value}; shift 2 ;;
            --prefix)   prefix=${2:?--prefix needs a value}; shift 2 ;;
            --burst)    burst=${2:?--burst needs a value}; shift 2 ;;
            --latency)  latency=${2:?--latency needs a value}; shift 2 ;;
            --timeout)  timeout_s=${2:?--timeout needs a value}; shift 2 ;;
            --finalize-guard) guard_s=${2:?--finalize-guard needs a value}; shift 2 ;;
            --eager)    eager=1; shift ;;
            --sample)   sample_dir=${2:?--sample needs a folder}; shift 2 ;;
            --jitter)   jitter=${2:?--jitter needs a value}; shift 2 ;;
            --cleanup)  do_cleanup=1; shift ;;
            -h|--help)  usage; exit 0 ;;
            --)         shift; cmd=("$@"); break ;;
            *)          die "unknown argument '$1' (the program goes after '--'; see --help)" ;;
        esac
    done
    [[ $prefix =~ ^[A-Za-z][A-Za-z0-9_]{0,30}$ ]] || die "--prefix must be alphanumeric (got '$prefix')"
    [[ $do_cleanup == 1 ]] && return
    if ! [[ $ranks =~ ^[0-9]+$ ]] || (( ranks < 1 || ranks > MAX_RANKS )); then
        die "--ranks must be an integer in 1..$MAX_RANKS (got '${ranks}')"
    fi
    [[ -n $rate ]] || die "--rate is required (e.g. 100mbit, or 'none')"
    [[ $timeout_s =~ ^[0-9]+$ ]] || die "--timeout must be whole seconds (got '$timeout_s')"
    [[ $guard_s =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--finalize-guard must be seconds (got '$guard_s')"
    if [[ $jitter != 0 ]]; then
        [[ $jitter =~ ^([0-9]+)(,([0-9]+))?$ ]] && (( BASH_REMATCH[1] >= 1 && BASH_REMATCH[1] <= 90 )) \
            || die "--jitter must be PCT or PCT,MS with PCT in 1..90 (got '$jitter')"
        [[ -z ${BASH_REMATCH[3]} ]] || jitter_ms=${BASH_REMATCH[3]}
        jitter=${BASH_REMATCH[1]}
        (( jitter_ms >= 10 )) || die "--jitter period must be at least 10 ms (got $jitter_ms)"
        [[ $rate != none ]] || die "--jitter needs a --rate to vary around (got --rate none)"
    fi
    (( ${#cmd[@]} > 0 )) || die "no program given (usage: $prog --ranks N --rate R -- PROGRAM [ARGS...])"
    if [[ $rate != none ]]; then
        # tc accepts many unit spellings; restrict to bit-based ones so the
        # burst derivation below stays right (tc's 'bps' means BYTES/s).
        [[ $rate =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)bit$ ]] \
            || die "--rate must look like 100mbit / 1gbit / 500kbit / 2.5gbit or 'none' (got '$rate')"
        if [[ -z $burst ]]; then
            # 1 ms worth of tokens, at least 32kbit: 32kbit gives ~96% of
            # 100mbit for TCP but only ~43% of 1gbit (timer granularity), while
            # 1 ms (1mbit) gives ~95% at 1gbit.
            burst=$(awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
                m = (u=="k") ? 1e3 : (u=="m") ? 1e6 : (u=="g") ? 1e9 : (u=="t") ? 1e12 : 1;
                k = int(n * m / 1e3 / 1e3 + 0.999);   # kbit per ms, rounded up
                if (k < 32) k = 32; printf "%dkbit", k }')
        fi
    fi
}

# ---------------------------------------------------------------- checks
preflight() {
    [[ $EUID -eq 0 ]] || die "must run as root (network namespaces, veth and tc need CAP_NET_ADMIN); try: sudo $0 ..."
    local t
    for t in ip tc mpiexec awk; do
        command -v "$t" >/dev/null || die "'$t' not found in PATH (install iproute2 for ip/tc, mpich for mpiexec)"
    done
    (( timeout_s == 0 )) || command -v timeout >/dev/null || die "'timeout' (coreutils) not found but --timeout was given"
    if [[ $guard_s != 0 ]]; then
        command -v mpicc >/dev/null \
            || die "'mpicc' not found; it builds the MPI_Finalize guard (install libmpich-dev, or pass --finalize-guard 0)"
        [[ -r $here/finalize_guard.c ]] || die "$here/finalize_guard.c is missing (or pass --finalize-guard 0)"
    fi
    # Flags below are hydra's (-launcher-exec, -localhost); Open MPI's mpirun differs.
    # (capture first: `mpiexec --version | grep -q` can fail with SIGPIPE under pipefail)
    local version
    version=$(mpiexec --version 2>/dev/null || true)
    [[ $version == *HYDRA* ]] \
        || die "mpiexec is not MPICH hydra ($(command -v mpiexec)); install mpich or put its mpiexec first in PATH"
    # Fail fast (before building the network) on a missing program; hydra runs
    # it with the same filesystem and working directory.
    if [[ ${cmd[0]} == */* ]]; then
        [[ -x ${cmd[0]} ]] || die "program '${cmd[0]}' is not an executable file"
    else
        command -v "${cmd[0]}" >/dev/null || die "program '${cmd[0]}' not found in PATH"
    fi
    local stale
    stale=$(stale_namespaces)
    [[ -z $stale ]] || die "network namespaces with prefix '$prefix-' already exist: ${stale//$'\n'/ }
  Another run may be active, or one crashed. If none is running, remove them with:
    $0 --cleanup --prefix $prefix
  or pick another --prefix."
}

stale_namespaces() { ip netns list | awk -v p="$prefix-" 'index($1, p) == 1 { print $1 }'; }

# ---------------------------------------------------------------- cleanup
# Kill whatever still runs inside a namespace (hydra proxies / ranks this run
# started), then delete it; deleting a namespace destroys its veths and bridge.
delete_ns() {
    local ns=$1 pids=()
    mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
    if (( ${#pids[@]} > 0 )); then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        sleep 1
        mapfile -t pids < <(ip netns pids "$ns" 2>/dev/null || true)
        (( ${#pids[@]} == 0 )) || kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || log "warning: could not delete namespace $ns"
}

# shellcheck disable=SC2329  # called from the EXIT trap (as are on_signal, on_error)
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP ERR
    set +e
    if [[ -n $launcher_pid ]] && kill -0 "$launcher_pid" 2>/dev/null; then
        # mpiexec forwards SIGTERM to its proxies, which kill the ranks.
        kill -TERM "$launcher_pid" 2>/dev/null
        for _ in 1 2 3 4 5; do kill -0 "$launcher_pid" 2>/dev/null || break; sleep 1; done
        kill -KILL "$launcher_pid" 2>/dev/null
    fi
    [[ -z $jitter_pid ]] || kill "$jitter_pid" 2>/dev/null
    local i
    for i in "${sampler_pids[@]}"; do kill "$i" 2>/dev/null; done
    for (( i = ${#created_ns[@]} - 1; i >= 0; i-- )); do   # ranks first, hub last
        delete_ns "${created_ns[i]}"
    done
    [[ -z $tmpdir ]] || rm -rf "$tmpdir"
    (( ${#created_ns[@]} == 0 )) || log "removed namespaces: ${created_ns[*]}"
    exit "$rc"
}

# shellcheck disable=SC2329
on_signal() { log "interrupted ($1), cleaning up"; exit "$2"; }   # EXIT trap does the work
# shellcheck disable=SC2329
on_error()  { echo "$prog: error: command failed (line $1): $2" >&2; }

# ---------------------------------------------------------------- network
rank_ns() { echo "$prefix-$1"; }
rank_ip() { echo "$SUBNET.$((RANK_IP_BASE + $1))"; }

add_ns() {
    ip netns add "$1"
    created_ns+=("$1")
    ip -n "$1" link set lo up
}

# Root tbf on the egress of device $2 in namespace $1.
shape() {
    [[ $rate == none ]] && return
    tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency "$latency"
}

setup_network() {
    local hub=$prefix-hub r ns
    add_ns "$hub"
    ip -n "$hub" link add "$BRIDGE" type bridge
    ip -n "$hub" addr add "$HUB_IP/24" dev "$BRIDGE"
    ip -n "$hub" link set "$BRIDGE" up
    for (( r = 0; r < ranks; r++ )); do
        ns=$(rank_ns "$r")
        add_ns "$ns"
        # Created directly in the two namespaces: never visible in the root one.
        ip link add name "$RANK_IF" netns "$ns" type veth peer name "r$r" netns "$hub"
        ip -n "$ns" addr add "$(rank_ip "$r")/24" dev "$RANK_IF"
        ip -n "$ns" link set "$RANK_IF" up
        ip -n "$hub" link set "r$r" master "$BRIDGE" up
        shape "$ns" "$RANK_IF"     # rank r -> hub
        shape "$hub" "r$r"         # hub -> rank r
    done
}

# Background loop (--jitter): redraws every shaped qdisc's rate each period.
# It must cost the ranks next to nothing: a first version forked awk, tc and
# sleep for every link every period (about 140 processes a second with two
# ranks), which took 10-15% of a core from the ranks' computation on a 2-core
# machine (docs/results/planner-accuracy.md, finding 8). Now one `tc -batch`
# per namespace stays running and reads its changes from a pipe, the rates
# are drawn with bash's $RANDOM, and the wait is a `read -t` timeout: no
# process starts inside the loop.
start_jitter() {
    (( jitter > 0 )) || return 0
    local kbit
    kbit=$(awk -v r="$rate" 'BEGIN {
        match(r, /^[0-9.]+/); n = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1, 1);
        m = (u=="k") ? 1 : (u=="m") ? 1e3 : (u=="g") ? 1e6 : (u=="t") ? 1e9 : 1e-3;
        printf "%d", n * m }')
    local pairs=() r
    for (( r = 0; r < ranks; r++ )); do pairs+=("$(rank_ns "$r") $RANK_IF" "$prefix-hub r$r"); done
    local period
    period=$(awk -v ms="$jitter_ms" 'BEGIN { printf "%.3f", ms / 1000 }')
    (
        trap - EXIT INT TERM HUP ERR
        set +e
        # One batch tc per namespace (-force: a failed change does not stop it).
        declare -A feed=()
        local p ns dev fd
        for p in "${pairs[@]}"; do
            read -r ns dev <<< "$p"
            if [[ -z ${feed[$ns]:-} ]]; then
                exec {fd}> >(exec tc -n "$ns" -force -batch - >/dev/null 2>&1)
                feed[$ns]=$fd
            fi
        done
        local lo=$(( kbit * (100 - jitter) / 100 )) hi=$(( kbit * (100 + jitter) / 100 )) tick
        exec {tick}<> <(:)   # never written: read -t on it is a sleep without a process
        while ! read -r -t "$period" -u "$tick"; do
            for p in "${pairs[@]}"; do
                read -r ns dev <<< "$p"
                echo "qdisc change dev $dev root tbf rate $(( lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1) ))kbit burst $burst latency $latency" >&"${feed[$ns]}"
            done
        done
    ) &
    jitter_pid=$!
    log "bandwidth jitter: each direction's rate redrawn every ${jitter_ms} ms from $rate x [$((100 - jitter))%, $((100 + jitter))%]"
}

# "<rx_bytes> <tx_bytes>" of the rank-side veth of rank $1.
link_bytes() {
    ip -n "$(rank_ns "$1")" -s link show dev "$RANK_IF" \
        | awk '/RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 } END { print rx, tx }'
}

# "retransmitted dropped-out dropped-in" of rank $1 since its namespace was
# made: TCP segments its kernel sent again (/proc/net/snmp is per network
# namespace) and packets its two tbf queues dropped (rank -> hub, hub ->
# rank). A transfer slower than the rate allows with drops here is TCP
# recovering from losses at the queue, not the rank waiting.
link_losses() {
    local ns
    ns=$(rank_ns "$1")
    echo "$(ip netns exec "$ns" awk '$1 == "Tcp:" { if (!h) { for (i = 2; i <= NF; i++) col[$i] = i; h = 1 }
                                                     else print $col["RetransSegs"] }' /proc/net/snmp)" \
         "$(qdisc_drops "$ns" "$RANK_IF")" "$(qdisc_drops "$prefix-hub" "r$1")"
}

# Packets the root qdisc of device $2 in namespace $1 dropped.
qdisc_drops() {
    tc -s -n "$1" qdisc show dev "$2" | awk '/dropped/ { sub(",", "", $7); print $7; exit }'
}

# ---------------------------------------------------------------- launcher
# Hydra's ssh launcher runs: <exec> [ssh options, e.g. -x] <host> <command words...>
# where the words form a shell command line (the proxy path comes quoted), as
# ssh would hand them to the remote shell. Map host -> namespace and run the
# line with sh there.
write_launcher() {
    local wrapper=$tmpdir/netns-launch r
    {
        cat <<'EOF'
#!/usr/bin/env bash
# generated by mpirun_shaped.sh: stand-in for ssh in hydra -launcher-exec
while [[ $# -gt 0 ]]; do
    case $1 in
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;   # ssh options with an argument
        -*) shift ;;
        *) break ;;
    esac
done
host=${1:?no host}; shift
case $host in
EOF
        for (( r = 0; r < ranks; r++ )); do
            echo "    $(rank_ip "$r")) ns=$(rank_ns "$r") ;;"
        done
        cat <<'EOF'
    *) echo "netns-launch: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
EOF
    } > "$wrapper"
    chmod 755 "$wrapper"
    echo "$wrapper"
}

run_job() {
    local wrapper hostfile=$tmpdir/hosts r
    wrapper=$(write_launcher)
    for (( r = 0; r < ranks; r++ )); do echo "$(rank_ip "$r"):1"; done > "$hostfile"

    local guard_env=()
    if [[ $guard_s != 0 ]]; then
        mpicc -shared -fPIC -O2 -o "$tmpdir/libfinalize_guard.so" "$here/finalize_guard.c" -lpthread
        guard_env=(-genv LD_PRELOAD "$tmpdir/libfinalize_guard.so${LD_PRELOAD:+:$LD_PRELOAD}"
                   -genv MPIRUN_SHAPED_FINALIZE_GUARD "$guard_s")
    fi

    local eager_env=()
    (( eager == 0 )) || eager_env=(-genv UCX_RNDV_THRESH inf)

    # shellcheck disable=SC2054  # "tcp,self" is one value, not a list
    local mpicmd=(
        mpiexec
        -launcher ssh -launcher-exec "$wrapper"
        -localhost "$HUB_IP"            # proxies call back to mpiexec over the bridge
        -f "$hostfile" -n "$ranks"      # one slot per host -> rank i in namespace i
        -genvall
        -genv UCX_TLS tcp,self          # no shm/cma: all namespaces share /dev/shm and the hostname
        -genv UCX_NET_DEVICES "$RANK_IF"
        -genv MPIR_CVAR_NOLOCAL 1       # MPICH must not treat the ranks as node-local
        -genv MALLOC_MMAP_MAX_ "${MALLOC_MMAP_MAX_:-0}"
        -genv MALLOC_TRIM_THRESHOLD_ "${MALLOC_TRIM_THRESHOLD_:-68719476736}"
        "${guard_env[@]}"               # see finalize_guard.c
        "${eager_env[@]}"
        "${cmd[@]}"
    )
    local pre=(ip netns exec "$prefix-hub")
    (( timeout_s == 0 )) || pre=(timeout -k 10 "$timeout_s" "${pre[@]}")
    log "exec: ${pre[*]} ${mpicmd[*]}"

    local before=() after=() rc=0
    for (( r = 0; r < ranks; r++ )); do before[r]=$(link_bytes "$r"); done
    # Background + wait so a TERM/INT to this script is handled at once (bash
    # defers traps until a foreground child exits); <&0 keeps stdin for rank 0.
    "${pre[@]}" "${mpicmd[@]}" <&0 &
    launcher_pid=$!
    wait "$launcher_pid" || rc=$?
    launcher_pid=""

    # Proof that the traffic crossed the shaped veths.
    for (( r = 0; r < ranks; r++ )); do
        after[r]=$(link_bytes "$r")
        log "$(awk -v r="$r" -v ns="$(rank_ns "$r")" -v b="${before[r]}" -v a="${after[r]}" 'BEGIN {
            split(b, x, " "); split(a, y, " ");
            printf "rank %d (%s/%s): tx %.1f MB, rx %.1f MB during the job", r, ns, "'"$RANK_IF"'",
                   (y[2] - x[2]) / 1e6, (y[1] - x[1]) / 1e6 }'); $(link_losses "$r" | awk '{
            printf "TCP segments retransmitted %s, tbf drops out %s, in %s", $1, $2, $3 }')"
    done
    (( rc == 0 )) || log "MPI job exited with status $rc"
    job_rc=$rc
}

print_header() {
    local r
    log "ranks=$ranks rate=$rate$([[ $rate == none ]] || echo " (tbf burst $burst latency $latency, both directions)")"
    log "hub: $prefix-hub $BRIDGE $HUB_IP/24 (mpiexec)"
    for (( r = 0; r < ranks; r++ )); do
        log "rank $r: $(rank_ns "$r") $RANK_IF $(rank_ip "$r")/24 <-> $prefix-hub r$r"
    done
}

# --sample: one link_sampler.py per rank namespace, from before the job
# starts until the namespace goes (it stops when its interface is gone).
start_samplers() {
    [[ -n $sample_dir ]] || return 0
    mkdir -p "$sample_dir"
    local r
    for (( r = 0; r < ranks; r++ )); do
        ip netns exec "$(rank_ns "$r")" python3 "$here/link_sampler.py" "$sample_dir/rank-$r.txt" "$RANK_IF" &
        sampler_pids+=("$!")
    done
    log "sampling each rank's $RANK_IF every 10 ms into $sample_dir/rank-<i>.txt"
}

# ---------------------------------------------------------------- main
main() {
    parse_args "$@"
    trap cleanup EXIT
    trap 'on_signal INT 130' INT
    trap 'on_signal TERM 143' TERM
    trap 'on_signal HUP 129' HUP
    trap 'on_error $LINENO "$BASH_COMMAND"' ERR

    if [[ $do_cleanup == 1 ]]; then
        [[ $EUID -eq 0 ]] || die "must run as root"
        local ns
        for ns in $(stale_namespaces); do delete_ns "$ns"; log "deleted $ns"; done
        exit 0
    fi

    preflight
    tmpdir=$(mktemp -d "/tmp/$prefix-mpirun.XXXXXX")
    setup_network
    print_header
    start_jitter
    start_samplers
    run_job
    exit "$job_rc"
}

main "$@"
