//! `mpirun -np N lowcomm calibrate --backend mpi`: the ranks sharing a node
//! are its workers (`LOWCOMM_RANKS_PER_NODE` overrides, as for training),
//! each rank computes while the others do (one thread each, a job barrier
//! before every repetition), and the link tiers are measured between ranks:
//!
//! - intra (two ranks or more per node): ping-pong between ranks 0 and 1,
//!   then every node's ranks all-reduce at once, each node its own group;
//! - inter (two nodes or more): ping-pong between rank 0 and the first rank
//!   of node 1, then an all-reduce over the first rank of every node, a
//!   whole buffer through each node's link, as the two-tier model costs it.
//!
//! Rank 0 gathers every rank's samples and builds the [`Calibration`].

use super::compute::{self, ComputeCosts, ComputeSetup};
use super::gather::{append, encode};
use super::{links, measured, overlap, progress, size_text, Calibration, Options, TierSource};
use crate::comm::mpi::MpiProcess;
use crate::comm::Fabric;
use anyhow::{bail, Result};

/// Sweeps between ranks: ping-pong of `pair` (if this rank is in it), then
/// the all-reduce of `group` (if this rank is in it); rank 0 prints progress.
fn sweep_tier(
    mpi: &MpiProcess,
    fabric: &mut dyn Fabric,
    what: &str,
    pair: (usize, usize),
    group: &[usize],
    sizes: &[usize],
) -> (Option<links::Sweep>, Option<links::Sweep>) {
    let root = mpi.rank() == 0;
    let n = sizes.len();
    let line = |kind: &'static str| {
        let mut done = 0;
        move |b: usize, s: f64| {
            done += 1;
            if root {
                progress(2, &format!("  {what} {kind} {:>8}: {:.4} ms ({done}/{n})", size_text(b), s * 1e3));
            }
        }
    };
    let me = mpi.rank();
    let pp = (me == pair.0 || me == pair.1).then(|| links::ping_pong(fabric, pair, sizes, &mut line("ping-pong")));
    mpi.barrier();
    let ar = group.contains(&me).then(|| links::all_reduce_sweep(fabric.group(group), sizes, &mut line("all-reduce")));
    mpi.barrier();
    (pp, ar)
}

/// Calibrates over this MPI job; `Some` on rank 0, `None` elsewhere.
pub fn run_mpi(
    opts: &Options,
    asked_per_node: Option<usize>,
    asked_nodes: Option<usize>,
) -> Result<Option<Calibration>> {
    super::check_link("intra", &opts.intra)?;
    super::check_link("inter", &opts.inter)?;
    let mpi = MpiProcess::init()?;
    let (rank, size) = (mpi.rank(), mpi.size());
    let root = rank == 0;
    if size < 2 {
        bail!("calibrate --backend mpi needs two ranks or more to measure a link (mpirun -np 2 ...); on one process, use --backend local");
    }
    let k = mpi.ranks_per_node(size)?;
    let nodes = size / k;
    for (flag, asked, got) in [("--workers-per-node", asked_per_node, k), ("--nodes", asked_nodes, nodes)] {
        if asked.is_some_and(|a| a != got) {
            bail!("{flag} {}: under mpirun the job's shape decides ({nodes} node(s) x {k} ranks); leave {flag} out, or set LOWCOMM_RANKS_PER_NODE to group the ranks otherwise", asked.unwrap_or(0));
        }
    }
    if root {
        progress(1, &format!("{size} MPI ranks, {nodes} node(s) x {k}: each rank computes while the others do"));
    }
    let setup = ComputeSetup {
        model: opts.model.clone(),
        batch: opts.batch,
        seq: opts.seq,
        threads: 1,
        node_workers: k,
        repeats: opts.repeats,
        warmup: opts.warmup,
        demo_members: size,
    };
    let say = |l: &str| {
        if root {
            progress(1, l)
        }
    };
    let mut mine = compute::measure(&setup, &|| mpi.barrier(), &say)?;
    let sizes = links::sizes(opts.max_bytes);
    let mut fabric = mpi.fabric();
    let node: Vec<usize> = (rank / k * k..(rank / k + 1) * k).collect();
    let intra = match (&opts.intra, k >= 2) {
        (Some(spec), _) => Some(TierSource::Given { spec: spec.clone(), why: "given with --intra".into() }),
        (None, true) => {
            if root {
                progress(2, &format!("intra-node link: ping-pong between ranks 0 and 1, then all-reduce within each node ({k} ranks), {} sizes", sizes.len()));
            }
            let (pp, ar) = sweep_tier(&mpi, &mut fabric, "intra", (0, 1), &node, &sizes);
            let how =
                format!("MPI ranks of one node: ping-pong ranks 0-1, all-reduce of each node's {k} ranks at once");
            ar.filter(|_| root).map(|ar| measured(how, k, ar, pp)).transpose()?.map(TierSource::Measured)
        }
        (None, false) => None,
    };
    let leaders: Vec<usize> = (0..nodes).map(|n| n * k).collect();
    let inter = match (&opts.inter, nodes >= 2) {
        (Some(spec), _) => Some(TierSource::Given { spec: spec.clone(), why: "given with --inter".into() }),
        (None, true) => {
            if root {
                progress(2, &format!("inter-node link: ping-pong between ranks 0 and {k}, then all-reduce over the first rank of each of {nodes} nodes, {} sizes", sizes.len()));
            }
            let (pp, ar) = sweep_tier(&mpi, &mut fabric, "inter", (0, k), &leaders, &sizes);
            let how = format!(
                "MPI ranks on different nodes: ping-pong ranks 0-{k}, all-reduce of one rank per node ({nodes})"
            );
            ar.filter(|_| root).map(|ar| measured(how, nodes, ar, pp)).transpose()?.map(TierSource::Measured)
        }
        (None, false) => None,
    };
    // Overlap: the model's gradient all-reduce over every rank, as the
    // synchronous methods send it, alone and while this rank computes.
    let bytes = (mine.params * 4).min(opts.max_bytes).max(4);
    let ranks: Vec<usize> = (0..size).collect();
    if root {
        progress(2, &format!("overlap: all-reduce of {} over {size} ranks, alone, while each rank computes micro-batches on a second thread, then the micro-batches alone, then chained as co2 runs them, in turn", size_text(bytes)));
    }
    let mut overlap =
        overlap::measure(fabric.group(&ranks), &opts.model, (opts.batch, opts.seq), bytes, opts.repeats.clamp(3, 10));
    // Ranks on one kernel share its cores: others' transfers slow this
    // rank's computation too (Overlap::one_transfer_factor).
    overlap.shared_cores = mpi.gather_bytes(&overlap::boot_id()).is_some_and(|ids| overlap::one_kernel(&ids));
    if root {
        progress(
            2,
            &format!(
                "  all-reduce {:.4} ms alone, {:.4} ms overlapped, {:.4} ms chained; micro-batch {:.4} ms overlapped ({} samples), {:.4} ms alone ({})",
                overlap.comm_alone.median() * 1e3,
                overlap.comm_overlapped.median() * 1e3,
                overlap.comm_chained.median() * 1e3,
                overlap.compute_overlapped.median() * 1e3,
                overlap.compute_overlapped.0.len(),
                overlap.compute_alone.median() * 1e3,
                overlap.compute_alone.0.len()
            ),
        );
    }
    drop(fabric);
    // The micro-batch once more, minutes later: the profile keeps the median
    // of both sets (on a shared machine one set was 17% off the runs that
    // followed it; docs/results/planner-accuracy.md, finding 9).
    say("micro-batch again, after the link phases (the mean over both sets is kept)");
    mine.add_micro_batches(compute::micro_batches(&setup, &|| mpi.barrier()));
    let all = mpi.gather_bytes(&encode(&mine));
    let Some(all) = all else { return Ok(None) };
    let mut compute = ComputeCosts { params: mine.params, demo_flops: mine.demo_flops, ..Default::default() };
    all.iter().for_each(|b| append(&mut compute, b));
    // One rank per node: no link inside a node is used; the inter tier stands in.
    let intra = match (intra, &inter) {
        (Some(t), _) => t,
        (None, Some(TierSource::Measured(m))) => TierSource::Given {
            spec: super::fit::tier_spec(&m.all_reduce.1.all_reduce_tier(m.members)),
            why: "one rank per node, so no link inside a node carries anything; the inter tier's numbers stand in"
                .into(),
        },
        (None, Some(TierSource::Given { spec, .. })) => {
            TierSource::Given { spec: spec.clone(), why: "one rank per node; the inter tier's numbers stand in".into() }
        }
        (None, None) => unreachable!("two ranks make two ranks per node or two nodes"),
    };
    Ok(Some(Calibration {
        opts: opts.clone(),
        backend: format!("mpi ({size} ranks)"),
        nodes,
        workers_per_node: k,
        sharing: mpi.local_ranks(),
        compute,
        memory_per_worker: super::memory_per_worker(mpi.local_ranks()),
        intra,
        inter,
        overlap: Some(overlap),
    }))
}
