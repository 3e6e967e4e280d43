//! `mpirun -np N lowcomm train --backend mpi --method M ...`: data-parallel
//! training with one worker per MPI process (feature `mpi`; docs/mpi.md).
//!
//! Every rank reads the run configuration and the prepared data, and takes
//! the shard of its rank. Rank 0's initial parameters are broadcast (they
//! are already equal by seed; the broadcast makes it so even across machines
//! that would differ). The worker runs on the real runtime with this
//! process's MPI communicator on its communication thread. At the end every
//! rank sends rank 0 its report (losses, times, spans, memory, a hash of its
//! parameters); rank 0 checks the replicas agree and writes metrics,
//! events, plots, trace and checkpoint exactly as an in-process run does.
//!
//! A rank that fails (an error or a panic) prints why and aborts the whole
//! job; a rank that dies silently is caught by the launcher or, failing
//! that, by the collective timeout of [`crate::comm::mpi::Poll`].

use super::config::RunConfig;
use super::parallel::{finish, setup, ParallelSummary};
use crate::comm::mpi::MpiProcess;
use crate::comm::{Communicator, WireDtype};
use crate::metrics::{EventLog, Span};
use crate::runtime::WorkerTimes;
use crate::strategy::{run_rank, MemoryBytes, Runtime, WorkerReport};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// What a rank sends rank 0 at the end (its parameters only as a hash).
#[derive(Serialize, Deserialize)]
struct ReportWire {
    rank: usize,
    losses: Vec<f32>,
    optimizer_steps: u64,
    times: WorkerTimes,
    spans: Vec<Span>,
    memory: MemoryBytes,
    params_sha256: String,
}

fn params_sha256(params: &[f32]) -> String {
    let bytes: Vec<u8> = params.iter().flat_map(|x| x.to_le_bytes()).collect();
    crate::util::sha256_hex(&bytes)
}

/// Initialises MPI for training: a panic anywhere aborts the job, and
/// `LOWCOMM_FAULT` (tests) is armed.
pub fn init() -> Result<MpiProcess> {
    let mpi = MpiProcess::init()?;
    // A panic on any thread of any rank takes the job down with a message
    // instead of leaving the other ranks waiting in a collective.
    let default_hook = std::panic::take_hook();
    let rank = mpi.rank();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        crate::comm::mpi::abort_job(&mpi::topology::SimpleCommunicator::world(), rank, "panicked");
    }));
    inject_fault(rank)?;
    // Ranks on one machine share its cores: without this, each would start
    // a compute pool as wide as the machine (4 ranks on 2 cores: 8 threads).
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = (cores / mpi.local_ranks()).max(1);
        // Fails only if a pool already exists; then that one is kept.
        let _ = rayon::ThreadPoolBuilder::new().num_threads(threads).build_global();
    }
    Ok(mpi)
}

/// Runs this process's rank of one training; rank 0 returns the run's
/// summary, the others `None`. Any failure ends every rank of the job.
pub fn run_parallel_mpi(mpi: &MpiProcess, cfg: RunConfig, quiet: bool) -> Result<Option<ParallelSummary>> {
    match run_rank_inner(mpi, cfg, quiet) {
        Ok(s) => Ok(s),
        Err(e) => mpi.abort(&format!("{e:#}")),
    }
}

/// Fault injection for the failure tests: `LOWCOMM_FAULT=KIND:RANK:SECONDS`
/// makes rank RANK, SECONDS after start, either `abort` (SIGABRT, no
/// cleanup, as a crash: the launcher sees it die) or `hang` (SIGSTOP: alive
/// but silent, which only the collective timeout catches).
fn inject_fault(rank: usize) -> Result<()> {
    let Ok(v) = std::env::var("LOWCOMM_FAULT") else { return Ok(()) };
    let mut parts = v.split(':');
    let parsed = (|| {
        Some((parts.next()?.to_string(), parts.next()?.parse::<usize>().ok()?, parts.next()?.parse::<f64>().ok()?))
    })();
    let (kind, victim, after_s) = parsed
        .filter(|(k, ..)| k == "abort" || k == "hang")
        .with_context(|| format!("LOWCOMM_FAULT={v}: expected abort|hang:RANK:SECONDS, e.g. abort:1:2.5"))?;
    if victim == rank {
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs_f64(after_s));
            eprintln!("lowcomm (mpi rank {rank}): LOWCOMM_FAULT: {kind} now");
            if kind == "abort" {
                std::process::abort();
            }
            let _ = std::process::Command::new("kill").args(["-STOP", &std::process::id().to_string()]).status();
        });
    }
    Ok(())
}

fn run_rank_inner(mpi: &MpiProcess, mut cfg: RunConfig, quiet: bool) -> Result<Option<ParallelSummary>> {
    let (rank, size) = (mpi.rank(), mpi.size());
    let p = &mut cfg.parallel;
    if p.runtime != "real" || p.cluster.is_some() {
        bail!("--backend mpi runs real processes: drop --runtime sim / --cluster (a simulated cluster runs in one process with --backend local)");
    }
    match p.workers {
        Some(w) if w != size => bail!("--workers {w} but mpirun started {size} ranks: drop --workers (the MPI job's size decides) or run mpirun -np {w}"),
        _ => p.workers = Some(size),
    }
    let s = setup(cfg)?;
    let Runtime::Real(spec) = &s.runtime else { unreachable!("runtime checked above") };
    let mut worker = s.worker(rank)?;
    // Identical starting point on every rank, bit for bit.
    mpi.comm(WireDtype::F32).broadcast(&mut worker.model.params, 0);
    let per_node = mpi.ranks_per_node()?;
    let wire = spec.wire;
    let two_tier = mpi.is_two_tier(per_node);
    let comm: Box<dyn Communicator> =
        if two_tier { Box::new(mpi.two_tier(per_node, wire)) } else { Box::new(mpi.comm(wire)) };
    if rank == 0 && !quiet {
        let topo = if two_tier {
            format!("{} nodes x {per_node} ranks, hierarchical all-reduce", size / per_node)
        } else {
            format!("{size} ranks, flat")
        };
        eprintln!(
            "{} [{topo}; {} compute threads per rank; MPI threading {:?}]",
            s.banner("mpi"),
            rayon::current_num_threads(),
            mpi.threading
        );
    }
    // Align the ranks' clocks (each span is timed from its process's start).
    mpi.barrier();
    let report = run_rank(s.method, spec, comm, worker, &s.plan)?;
    let wire = ReportWire {
        rank,
        losses: report.losses.clone(),
        optimizer_steps: report.optimizer_steps,
        times: report.times.clone(),
        spans: report.events.spans().to_vec(),
        memory: report.memory,
        params_sha256: params_sha256(&report.params),
    };
    let Some(all) = mpi.gather_bytes(&serde_json::to_vec(&wire)?) else { return Ok(None) };
    let mut reports = Vec::with_capacity(size);
    for bytes in all {
        let w: ReportWire = serde_json::from_slice(&bytes)
            .context("a rank's report did not decode (ranks built from different lowcomm versions?)")?;
        if w.params_sha256 != wire.params_sha256 {
            bail!(
                "rank {} ended with different parameters than rank 0 (sha256 {} vs {}): the replicas diverged",
                w.rank,
                w.params_sha256,
                wire.params_sha256
            );
        }
        let params = if w.rank == 0 { report.params.clone() } else { Vec::new() };
        reports.push(WorkerReport {
            rank: w.rank,
            losses: w.losses,
            optimizer_steps: w.optimizer_steps,
            times: w.times,
            params,
            events: EventLog::from_spans(w.spans),
            memory: w.memory,
        });
    }
    finish(s, reports, quiet).map(Some)
}
