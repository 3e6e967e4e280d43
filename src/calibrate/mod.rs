//! `lowcomm calibrate`: measures on this machine (and, under `mpirun`,
//! between its ranks) what the cost model needs, and writes it as a cluster
//! profile (configs/clusters/README.md) with every number's provenance in
//! comments, which `plan`, `train --runtime sim` and `compare` read as any
//! profile.
//!
//! Three phases, each with progress lines:
//! 1. compute (compute.rs, samples.rs): a micro-batch's seconds with all
//!    local workers computing at once (shared cores show), its spread within
//!    each set and how much a slow one predicts the next (correlation.rs),
//!    and the rates of the costed work outside it: AdamW, the outer step
//!    (memory bandwidth), DeMo's DCT encode/decode (FLOP rate);
//! 2. links (links.rs, fit.rs): all-reduce (and under MPI ping-pong) sweeps
//!    over message sizes per link tier, fitted to alpha-beta; a sweep the
//!    line does not fit is said to be so in the profile;
//!    under MPI, how much computation and communication slow each other
//!    when a rank runs both at once (overlap.rs);
//! 3. the profile (profile.rs).
//!
//! In-process the workers of one node are threads, and their link is the
//! threads backend's shared memory; between nodes nothing can be measured
//! without MPI, so `--inter` is kept as given. mpi.rs is the MPI job;
//! gather.rs carries each rank's samples to rank 0.

pub mod compute;
pub mod correlation;
pub mod fit;
pub mod gather;
pub mod links;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod overlap;
pub mod profile;
pub mod samples;

use crate::model::GptConfig;
use anyhow::{bail, Result};
use compute::{ComputeCosts, ComputeSetup};
use fit::AlphaBeta;
use links::Sweep;

/// What the command line asks for.
#[derive(Clone, Debug)]
pub struct Options {
    /// The model preset's name, for the profile's comments.
    pub preset: String,
    /// The model timed.
    pub model: GptConfig,
    /// Sequences per micro-batch.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Workers per node; in-process: threads computing at once.
    pub workers_per_node: usize,
    /// Nodes of the profile (in-process: only `--inter` can describe their link).
    pub nodes: usize,
    /// Timed repetitions of each kind of work per worker.
    pub repeats: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
    /// Largest message of the link sweeps, bytes.
    pub max_bytes: usize,
    /// `--intra`: a link spec used as is (the tier is then not measured).
    pub intra: Option<String>,
    /// `--inter`: a link spec used as is.
    pub inter: Option<String>,
    /// The profile's `name`; default from the machine and the shape.
    pub name: Option<String>,
    /// The command line, for the profile's header.
    pub command: String,
}

/// One measured link tier.
#[derive(Clone, Debug)]
pub struct Measured {
    /// How and between whom it was measured.
    pub how: String,
    /// Members of the all-reduce.
    pub members: usize,
    /// All-reduce seconds per size, and its fit.
    pub all_reduce: (Sweep, AlphaBeta),
    /// Ping-pong one-way seconds per size, and its fit (MPI only).
    pub ping_pong: Option<(Sweep, AlphaBeta)>,
}

/// Where a tier of the profile comes from.
#[derive(Clone, Debug)]
pub enum TierSource {
    /// Measured here.
    Measured(Measured),
    /// Given on the command line; why it was not measured.
    Given { spec: String, why: String },
}

/// Everything the profile says.
#[derive(Clone, Debug)]
pub struct Calibration {
    /// Options as given.
    pub opts: Options,
    /// `threads` or `mpi (N ranks)`: how the workers ran.
    pub backend: String,
    /// Nodes and workers per node of the profile.
    pub nodes: usize,
    /// Workers per node.
    pub workers_per_node: usize,
    /// Workers that computed at once on this machine while timed: the
    /// threads, or under MPI the ranks sharing its memory (more than
    /// `workers_per_node` when `LOWCOMM_RANKS_PER_NODE` splits a machine).
    pub sharing: usize,
    /// The computation's costs (under MPI: every rank's samples).
    pub compute: ComputeCosts,
    /// Host memory per local worker, bytes (MemTotal / workers per node), if readable.
    pub memory_per_worker: Option<f64>,
    /// The intra-node tier.
    pub intra: TierSource,
    /// The inter-node tier, when there is more than one node or it was given.
    pub inter: Option<TierSource>,
    /// Under MPI: computation and communication overlapped on a rank
    /// (rank 0's samples); `None` in one process.
    pub overlap: Option<overlap::Overlap>,
}

/// A progress line on stderr: `calibrate [phase/3] ...`.
pub fn progress(phase: usize, what: &str) {
    eprintln!("calibrate [{phase}/3] {what}");
}

/// Human-readable size of a sweep step: `4 B`, `16 KiB`, `64 MiB`.
pub fn size_text(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Checks a `--intra`/`--inter` value; the error names the flag.
pub fn check_link(flag: &str, spec: &Option<String>) -> Result<()> {
    if let Some(s) = spec {
        s.parse::<crate::comm::Tier>().map_err(|e| anyhow::anyhow!("--{flag}: {e}"))?;
    }
    Ok(())
}

/// Host memory per local worker: MemTotal of /proc/meminfo over `k`.
pub fn memory_per_worker(k: usize) -> Option<f64> {
    let t = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: f64 = t.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0 / k.max(1) as f64)
}

/// The all-reduce sweep's progress line and its fit into a [`Measured`].
pub fn measured(how: String, members: usize, sweep: Sweep, ping_pong: Option<Sweep>) -> Result<Measured> {
    let ar = fit::fit(&sweep)?;
    let pp = ping_pong.map(|s| fit::fit(&s).map(|f| (s, f))).transpose()?;
    Ok(Measured { how, members, all_reduce: (sweep, ar), ping_pong: pp })
}

/// Calibrates in this process: `workers_per_node` threads compute at once,
/// the intra tier is the threads' shared-memory all-reduce (unless
/// `--intra`), the inter tier is `--inter` as given.
pub fn run_local(opts: &Options) -> Result<Calibration> {
    let (k, nodes) = (opts.workers_per_node.max(1), opts.nodes.max(1));
    check_link("intra", &opts.intra)?;
    check_link("inter", &opts.inter)?;
    if nodes > 1 && opts.inter.is_none() {
        bail!("--nodes {nodes}: the link between nodes cannot be measured in one process; give it, e.g. --inter 10gbit,50us, or run calibrate under mpirun with ranks on every node (mpirun -np N lowcomm calibrate --backend mpi ...)");
    }
    let setup = ComputeSetup {
        model: opts.model.clone(),
        batch: opts.batch,
        seq: opts.seq,
        threads: k,
        node_workers: k,
        repeats: opts.repeats,
        warmup: opts.warmup,
        demo_members: nodes * k,
    };
    let compute = compute::measure(&setup, &|| {}, &|l| progress(1, l))?;
    let intra = match &opts.intra {
        Some(spec) => TierSource::Given { spec: spec.clone(), why: "given with --intra".into() },
        None => {
            let p = k.max(2);
            let sizes = links::sizes(opts.max_bytes);
            progress(
                2,
                &format!(
                    "intra-node link: all-reduce among {p} threads of this process, {} sizes from 4 B to {}",
                    sizes.len(),
                    size_text(*sizes.last().expect("sizes"))
                ),
            );
            let n = sizes.len();
            let mut done = 0;
            let sweep = links::local_all_reduce(p, &sizes, &mut |b, s| {
                done += 1;
                progress(2, &format!("  all-reduce {:>8}: {:.3} ms ({done}/{n})", size_text(b), s * 1e3));
            });
            let how = format!(
                "all-reduce among {p} threads of this process (the threads backend's shared-memory collectives){}",
                if k == 1 { "; with one worker per node this tier carries nothing" } else { "" }
            );
            TierSource::Measured(measured(how, p, sweep, None)?)
        }
    };
    let inter = opts.inter.clone().map(|spec| TierSource::Given {
        spec,
        why: "given with --inter: links between machines are measured only under mpirun".into(),
    });
    Ok(Calibration {
        opts: opts.clone(),
        backend: "threads".into(),
        nodes,
        workers_per_node: k,
        sharing: k,
        compute,
        memory_per_worker: memory_per_worker(k),
        intra,
        inter,
        overlap: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_local_calibration_is_a_profile_with_consistent_numbers() {
        let model = GptConfig::gpt2(37, 16, 1, 2, 8);
        let opts = Options {
            preset: "tiny".into(),
            model,
            batch: 2,
            seq: 8,
            workers_per_node: 2,
            nodes: 1,
            repeats: 2,
            warmup: 0,
            max_bytes: 4 << 20,
            intra: None,
            inter: None,
            name: Some("t".into()),
            command: "test".into(),
        };
        let c = run_local(&opts).unwrap();
        let TierSource::Measured(m) = &c.intra else { panic!("the intra tier is measured in-process") };
        let sweep = &m.all_reduce.0;
        assert_eq!(sweep.len(), links::sizes(4 << 20).len());
        // 4 MiB takes longer than 4 B: both pay the same rendezvous of the
        // threads, and 4 MiB adds ~1000x 4 KiB of copying (~1 ms), so load does not reverse it.
        assert!(sweep.last().unwrap().1 > sweep[0].1, "{sweep:?}");
        let p = crate::runtime::cluster::ClusterProfile::from_toml(&profile::render(&c)).unwrap();
        let spec = p.sim_spec(&opts.model, c.compute.params, 16, vec![1.0; 2]).unwrap();
        assert!(spec.micro_batch_s > 0.0 && spec.memory_bytes_per_s > Some(0.0) && spec.flops_per_s > Some(0.0));
        // The profile's all-reduce grows with size: the fitted line
        // everywhere, and the measured sweep the simulator costs from
        // between its ends (the sizes asserted above; sizes in between are
        // single noisy medians, which load can reorder).
        let l = p.link_model().unwrap();
        let line = crate::comm::Tier::line(l.intra.latency_s, l.intra.bandwidth_bytes_per_s);
        assert!(line.all_reduce_s(1e6, 2) > line.all_reduce_s(4.0, 2) && l.intra.latency_s >= 0.0);
        let (first, last) = (sweep[0].0, sweep.last().unwrap().0);
        assert!(l.intra.all_reduce_s(last, 2) > l.intra.all_reduce_s(first, 2));
        // Two nodes need the link between them given.
        let two = Options { nodes: 2, ..opts };
        assert!(run_local(&two).unwrap_err().to_string().contains("--inter 10gbit,50us"));
    }
}
