//! `mpirun -np N lowcomm train --backend mpi --method M ...`: data-parallel
//! training with one worker per MPI process (feature `mpi`; docs/mpi.md).
//!
//! Every rank reads the run configuration and the prepared data, and takes
//! the shard of its rank. Rank 0's initial parameters are broadcast (they
//! are already equal by seed; the broadcast makes it so even across machines
//! that would differ). The worker runs on the real runtime with this
//! process's MPI fabric on its communication thread. Checkpoints: each rank
//! writes its own part into the checkpoint's temp directory (a filesystem
//! all ranks share), then rank 0 hashes every part into the manifest,
//! writes the model and commits. At the end every rank sends rank 0 its
//! report (rounds, times, spans, memory, its model piece, a hash of its
//! parameters); rank 0 checks the replicas agree and writes events, plots
//! and trace exactly as an in-process run does; rank 0 alone writes the
//! metrics as rounds end.
//!
//! A rank that fails (an error or a panic) prints why and aborts the whole
//! job; a rank that dies silently is caught by the launcher or, failing
//! that, by the collective timeout of [`crate::comm::mpi::Poll`].

use super::log::RoundLog;
use super::mpi_sink::MpiSink;
use super::report::finish;
use super::{setup, ParallelSummary};
use crate::comm::mpi::MpiProcess;
use crate::comm::{Communicator, WireDtype};
use crate::metrics::{EventLog, Span};
use crate::runtime::{Topology, WorkerTimes};
use crate::strategy::{
    run_rank, Checkpointing, Hooks, MemoryBytes, ModelPiece, Participant, Runtime, StepPoint, StopRequest, StopVote,
    WorkerReport,
};
use crate::train::config::RunConfig;
use crate::train::run::RunOptions;
use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What a rank sends rank 0 at the end (its parameters only as a hash).
#[derive(Serialize, Deserialize)]
struct ReportWire {
    rank: usize,
    points: Vec<StepPoint>,
    optimizer_steps: u64,
    times: WorkerTimes,
    spans: Vec<Span>,
    memory: MemoryBytes,
    exchange: Option<crate::strategy::Budget>,
    model: Option<(usize, Vec<f32>)>,
    params_sha256: String,
    /// The server's updates applied per worker (empty for workers).
    #[serde(default)]
    updates: Vec<u64>,
    /// The server's rounds as handed out (empty for workers).
    #[serde(default)]
    shard_rounds: Vec<crate::strategy::diloco::shards::ShardRound>,
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
pub fn run_parallel_mpi(mpi: &MpiProcess, cfg: RunConfig, opts: &RunOptions) -> Result<Option<ParallelSummary>> {
    match run_rank_inner(mpi, cfg, opts) {
        Ok(s) => Ok(s),
        // Stopped on request, every rank at one boundary: an orderly end.
        Err(e) if e.is::<crate::train::interrupt::Interrupted>() => Err(e),
        Err(e) => mpi.abort(&format!("{e:#}")),
    }
}

/// Ctrl-C (train/interrupt.rs) under MPI: the ranks vote at every boundary
/// (strategy/stop.rs); under a server, the server (the last rank) decides
/// alone and tells the workers. Without `MPI_THREAD_MULTIPLE` there is no
/// vote, and the launcher's handling ends the job (a second Ctrl-C).
fn stop_request(mpi: &MpiProcess, opts: &RunOptions, server: bool, last: bool) -> Option<Arc<StopRequest>> {
    let flag = opts.stop.clone()?;
    match (server, last) {
        (true, true) => Some(StopRequest::new(flag)),
        (true, false) => None,
        (false, _) => {
            let vote = mpi.flag_vote();
            if vote.is_none() && mpi.rank() == 0 {
                eprintln!("note: MPI grants only {:?} threading, so the ranks cannot vote on a Ctrl-C: it will not stop at a round boundary (a second one ends the job; docs/mpi.md)", mpi.threading);
            }
            vote.map(|v| StopRequest::voting(flag, Box::new(Vote(v))))
        }
    }
}

struct Vote(crate::comm::mpi::FlagVote);

impl StopVote for Vote {
    fn any(&self, mine: bool) -> bool {
        self.0.any_raised(mine)
    }
}

/// Fault injection for the failure tests: `LOWCOMM_FAULT=KIND:RANK:WHEN`
/// makes rank RANK either `abort` (SIGABRT, no cleanup, as a crash: the
/// launcher sees it die) or `hang` (SIGSTOP: alive but silent, which only
/// the timeouts catch). WHEN is seconds after start, or `group` (hang
/// only): just before the rank makes its first group's communicator.
fn inject_fault(rank: usize) -> Result<()> {
    let Ok(v) = std::env::var("LOWCOMM_FAULT") else { return Ok(()) };
    let mut parts = v.split(':');
    // (kind, victim, seconds after start; None: before the first group)
    let parsed = (|| {
        let kind = parts.next()?.to_string();
        let victim = parts.next()?.parse::<usize>().ok()?;
        let after = match parts.next()? {
            "group" if kind == "hang" => None,
            secs => Some(secs.parse::<f64>().ok()?),
        };
        Some((kind, victim, after))
    })();
    let (kind, victim, after) = parsed.filter(|(k, ..)| k == "abort" || k == "hang").with_context(|| {
        format!("LOWCOMM_FAULT={v}: expected abort|hang:RANK:SECONDS or hang:RANK:group, e.g. abort:1:2.5")
    })?;
    if victim != rank {
        return Ok(());
    }
    let Some(after_s) = after else {
        crate::comm::mpi::hang_before_first_group();
        return Ok(());
    };
    let after = std::time::Duration::from_secs_f64(after_s);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        if kind == "abort" {
            eprintln!("lowcomm (mpi rank {rank}): LOWCOMM_FAULT: abort now");
            std::process::abort();
        }
        crate::comm::mpi::stop_this_process(rank);
    });
    Ok(())
}

fn run_rank_inner(mpi: &MpiProcess, mut cfg: RunConfig, opts: &RunOptions) -> Result<Option<ParallelSummary>> {
    let (rank, size) = (mpi.rank(), mpi.size());
    let p = &cfg.parallel;
    if p.runtime != "real" || p.cluster.is_some() {
        bail!("--backend mpi runs real processes: drop --runtime sim / --cluster (a simulated cluster runs in one process with --backend local)");
    }
    // A method with a parameter server runs it on the last rank.
    let server = super::method(&cfg)?.needs_server();
    let p = &mut cfg.parallel;
    let workers = size - usize::from(server);
    if workers == 0 {
        bail!("--method async-diloco under MPI needs a rank per worker plus one for the server: e.g. mpirun -np 5 lowcomm train --backend mpi --workers 4 ...");
    }
    match p.workers {
        // Resuming, the workers come from the checkpoint, not from a flag.
        Some(w) if w != workers && opts.resume.is_some() => bail!(
            "the checkpoint in {} has {w} workers{}, this MPI job has {size} ranks: resume it with mpirun -np {} (a run continues with the workers it was trained with)",
            opts.resume.as_ref().map_or_else(String::new, |r| r.display().to_string()),
            if server { " and a parameter server" } else { "" },
            w + usize::from(server)
        ),
        Some(w) if w != workers && server => bail!("--workers {w} but mpirun started {size} ranks: a method with a server needs workers + 1 ranks (the server is the last), e.g. mpirun -np {} with --workers {w}", w + 1),
        Some(w) if w != workers => bail!("--workers {w} but mpirun started {size} ranks: drop --workers (the MPI job's size decides) or run mpirun -np {w}"),
        _ => p.workers = Some(workers),
    }
    let cfg_nodes = p.nodes;
    let quiet = opts.quiet || rank != 0;
    let mut s = setup(cfg, &RunOptions { quiet, ..opts.clone() })?;
    let per_node = mpi.ranks_per_node(size)?;
    if let Some(n) = cfg_nodes {
        ensure!(
            n * per_node == size,
            "--nodes {n} but this job has {} nodes of {per_node} ranks: under MPI the nodes come from the machines (or LOWCOMM_RANKS_PER_NODE); drop --nodes",
            size / per_node
        );
    }
    let Runtime::Real(spec) = &mut s.runtime else { unreachable!("runtime checked above") };
    spec.topology = Topology { workers, per_node: per_node.min(workers), server };
    let spec = spec.clone();
    let per_node = per_node.min(workers);
    if let Some(r) = &s.resumed {
        ensure!(
            r.shape.per_node == per_node,
            "checkpoint {} was trained with {} ranks per node, this job has {per_node}",
            r.dir.display(),
            r.shape.per_node
        );
    }
    // Every check passed (every rank runs the same ones on the same config
    // and data): only now does rank 0 take the run directory's lock (held to
    // the end) and may --force replace an old run. The other ranks wait for
    // rank 0 in the broadcast below, before they write anything.
    let _lock = if rank == 0 { Some(crate::train::lock::RunLock::acquire(&s.cfg.train.out_dir)?) } else { None };
    if rank == 0 && opts.resume.is_none() {
        crate::train::rundir::claim_fresh(&s.cfg.train.out_dir, opts.force)?;
    }
    // Identical starting point on every rank, bit for bit.
    let mut theta = s.init.params.clone();
    mpi.comm().broadcast(&mut theta, 0, WireDtype::F32);
    let participant = if rank < workers {
        let mut worker = s.worker_on(rank, mpi.local_rank())?;
        worker.model.params.copy_from_slice(&theta);
        Participant::Worker(Box::new(worker))
    } else {
        Participant::Server(theta)
    };
    // Rank 0's process id names the checkpoints' shared temp directories.
    let mut pid = vec![0u8; 4 * size];
    mpi.comm().all_gather_bytes(&std::process::id().to_le_bytes(), &mut pid);
    let job = u32::from_le_bytes(pid[..4].try_into().expect("4 bytes"));
    if rank == 0 && !quiet {
        let topo = if per_node < size {
            format!("{} nodes x {per_node} ranks", size / per_node)
        } else {
            format!("{size} ranks, one node")
        };
        eprintln!(
            "{} [{topo}; {} compute threads per rank; MPI threading {:?}]",
            s.banner("mpi"),
            rayon::current_num_threads(),
            mpi.threading
        );
    }
    // Rank 0 shows its own rounds as they end, and logs everyone's from the
    // parts of each checkpoint (the other ranks' rounds travel in them).
    let (show, metrics) = if rank == 0 {
        (Some(Arc::new(s.round_log(false, 1)?)), Some(Arc::new(s.round_log(true, workers)?)))
    } else {
        (None, None)
    };
    let sink = Arc::new(MpiSink {
        id: s.identity()?,
        n_params: s.init.num_params(),
        rank,
        size,
        job,
        comm: Mutex::new(mpi.comm()),
        metrics: metrics.clone(),
        written: Mutex::new(Vec::new()),
    });
    let mut resumed = s.resumed_parts()?;
    let hooks = Hooks {
        observer: show.clone().map(|l| l as Arc<dyn crate::strategy::Observer>),
        checkpoints: Checkpointing {
            every: super::checkpoint_every(&s.cfg, &s.method),
            sink: Some(sink.clone()),
            stop: stop_request(mpi, opts, server, rank == size - 1),
        },
        resumed: std::mem::take(&mut resumed),
    };
    // Align the ranks' clocks (each span is timed from its process's start).
    mpi.barrier();
    let ran = run_rank(&s.method, &spec, Box::new(mpi.fabric()), participant, &s.plan, &hooks);
    drop(hooks);
    let report = match ran {
        // Every rank stopped at the same boundary, after its part of the checkpoint there.
        Err(e) if crate::runtime::is_stopped(&e) => {
            let (log, written) = close(show, metrics, sink);
            if let Some(log) = log {
                log.finish()?;
            }
            // Every rank ends with it (status 130 whichever exit the launcher reports); rank 0 says it.
            return Err(crate::train::interrupt::Interrupted {
                run_dir: s.cfg.train.out_dir.clone(),
                step: written.as_ref().map_or(s.resumed.as_ref().map_or(0, |r| r.round), |(round, _)| *round),
                checkpoint: written.map(|(_, d)| d),
                steps: s.plan.steps,
                launcher: Some(format!("mpirun -np {size} ")),
            }
            .into());
        }
        r => r?,
    };
    let wire = ReportWire {
        rank,
        points: report.points.clone(),
        optimizer_steps: report.optimizer_steps,
        times: report.times.clone(),
        spans: report.events.spans().to_vec(),
        memory: report.memory,
        exchange: report.exchange,
        model: report.model.clone().map(|m| (m.offset, m.values)),
        params_sha256: params_sha256(&report.params),
        updates: report.updates.clone(),
        shard_rounds: report.shard_rounds.clone(),
    };
    let Some(all) = mpi.gather_bytes(&serde_json::to_vec(&wire)?) else { return Ok(None) };
    let mut reports = Vec::with_capacity(size);
    for bytes in all {
        let w: ReportWire = serde_json::from_slice(&bytes)
            .context("a rank's report did not decode (ranks built from different lowcomm versions?)")?;
        // Replicas agree, except under a server: there workers differ by design.
        if !server && w.params_sha256 != wire.params_sha256 {
            bail!(
                "rank {} ended with different parameters than rank 0 (sha256 {} vs {}): the replicas diverged",
                w.rank,
                w.params_sha256,
                wire.params_sha256
            );
        }
        let params = if w.rank == 0 { report.params.clone() } else { Vec::new() };
        let model = w.model.map(|(offset, values)| ModelPiece { offset, values });
        reports.push(WorkerReport {
            rank: w.rank,
            points: w.points,
            optimizer_steps: w.optimizer_steps,
            times: w.times,
            params,
            model,
            events: EventLog::from_spans(w.spans),
            memory: w.memory,
            exchange: w.exchange,
            updates: w.updates,
            shard_rounds: w.shard_rounds,
            // Fault plans are refused under MPI (a dead rank ends the job).
            faults: Vec::new(),
            sent: 0,
        });
    }
    let (log, written) = close(show, metrics, sink);
    let log = log.expect("rank 0 logs");
    let checkpoint = written.map(|(_, d)| d).context("the run ended without writing its final checkpoint")?;
    finish(s, reports, log, checkpoint).map(Some)
}

/// The end of a rank's run, finished or stopped: its progress lines done,
/// rank 0's metrics log and the last checkpoint written (round, directory).
fn close(
    show: Option<Arc<RoundLog>>,
    metrics: Option<Arc<RoundLog>>,
    sink: Arc<MpiSink>,
) -> (Option<RoundLog>, Option<(u64, PathBuf)>) {
    drop(show.map(|l| Arc::into_inner(l).map(|l| l.finish())));
    drop(metrics);
    let sink = Arc::into_inner(sink).expect("the run is over: one owner left");
    let log = sink.metrics.map(|l| Arc::into_inner(l).expect("the run is over: one owner left"));
    (log, sink.written.into_inner().unwrap_or_else(|e| e.into_inner()).pop())
}
