//! Will a run fit in memory? The bytes a run will allocate, estimated from
//! its settings before anything big is allocated, against what this
//! machine has available: a run that cannot fit is refused with both
//! numbers, instead of aborting ("memory allocation failed", status 134)
//! or being killed (137) when the allocation comes (`--batch-size 1e8`;
//! `--workers 1000 --runtime sim` under a 3.2 GB limit).
//!
//! What is counted, as the trainer allocates it (f32 buffers; n parameters):
//! - data: both splits as u32 token ids, plus the training file's bytes
//!   while it is read;
//! - per worker replica (every worker of an in-process run lives in this
//!   process; an MPI rank holds one): the model states the planner counts
//!   for the method (`plan::memory`, `Precision::F32`: parameters,
//!   gradients, communication buffers, optimizer and outer state), the
//!   activations of one micro-batch (`Activations::bytes_for`, exact) and
//!   its input and target ids; async DiLoCo's server its own row;
//! - a checkpoint being written or read: every participant's part in
//!   memory at once (its optimizer, outer and communication state) plus the
//!   model, and one file's bytes twice (encoded, then serialised);
//! - the initial model a data-parallel run keeps (parameters and
//!   gradients), 2 MiB of stack per thread on the real runtime (2 per
//!   participant), and 32 MiB for the program itself.
//!
//! The run needs the estimate plus a margin of 10% (allocator slack, the
//! GEMM's packing buffers, evaluation's batch); docs/design.md, "Checks
//! before a run starts", compares it with measured peak RSS.
//!
//! Available: the least of /proc/meminfo's MemAvailable, the cgroup's
//! memory limit less its usage (v2 `memory.max`, v1
//! `memory.limit_in_bytes`, at the process's cgroup and each one above it),
//! and the address-space limit (`ulimit -v`) less what the process maps.
//! `LOWCOMM_MEMORY_AVAILABLE=BYTES` replaces them all (tests).

use super::config::RunConfig;
use crate::model::activations::Activations;
use crate::model::{GptConfig, ParamLayout};
use crate::plan::{Costing, Precision};
use crate::runtime::sim::SimSpec;
use crate::runtime::Topology;
use crate::strategy::{MemoryBytes, Method};
use anyhow::{bail, Result};
use std::path::Path;

/// What the estimate adds for the program itself.
const BASE: f64 = 32.0 * 1048576.0;
/// The margin on top of the estimate.
const MARGIN: f64 = 0.10;
/// Stack reserved per thread (std's default for spawned threads).
const STACK: f64 = 2.0 * 1048576.0;

/// A run's memory, by part.
#[derive(Clone, Debug)]
pub struct Estimate {
    /// (what, bytes), largest first once built.
    pub parts: Vec<(String, f64)>,
    /// What to change to need less, in the order of `parts`.
    pub fixes: Vec<&'static str>,
}

impl Estimate {
    /// The sum of the parts.
    pub fn total(&self) -> f64 {
        self.parts.iter().map(|(_, b)| b).sum()
    }

    /// What the run needs: the estimate plus the margin.
    pub fn need(&self) -> f64 {
        self.total() * (1.0 + MARGIN)
    }

    fn add(&mut self, what: String, bytes: f64, fix: &'static str) {
        self.parts.push((what, bytes));
        self.fixes.push(fix);
    }
}

/// Data, as loaded: both splits in u32, the training file while it is read.
fn data(cfg: &RunConfig, model: &GptConfig) -> f64 {
    match crate::data::Dataset::open_meta(&cfg.data_dir(model)) {
        Ok(m) => {
            let width = match m.dtype {
                crate::data::tokens::TokenDtype::U16 => 2.0,
                crate::data::tokens::TokenDtype::U32 => 4.0,
            };
            4.0 * (m.train_tokens + m.val_tokens) as f64 + width * m.train_tokens as f64
        }
        // No corpus: opening it will say so.
        Err(_) => 0.0,
    }
}

/// One micro-batch: activations and the input and target ids.
fn micro_batch(cfg: &RunConfig, model: &GptConfig) -> f64 {
    let (b, t) = (cfg.train.batch_size, cfg.seq_len(model));
    Activations::bytes_for(model, b, t) + 8.0 * b as f64 * t as f64
}

/// A single-worker run.
pub fn single(cfg: &RunConfig, model: &GptConfig) -> Result<Estimate> {
    let n = ParamLayout::new(model).len as f64;
    let s = cfg.optimizer.try_build(1)?.state_len() as f64;
    let mut e = Estimate { parts: Vec::new(), fixes: Vec::new() };
    e.add("model states".into(), 8.0 * n + 4.0 * s * n, "a smaller model");
    e.add("activations".into(), micro_batch(cfg, model), "a smaller --batch-size (or --seq-len)");
    e.add("data".into(), data(cfg, model), "a smaller corpus");
    // The larger checkpoint file, encoded and serialised.
    e.add("a checkpoint".into(), 2.0 * 4.0 * n * s.max(1.0), "a smaller model");
    e.add("the program".into(), BASE, "");
    Ok(sorted(e))
}

/// A data-parallel run of `method` with `workers` workers (and its server,
/// if the method has one): all in this process, or (`mpi`) one per process,
/// counted as a worker; `threads`: the real runtime's two threads per
/// participant.
pub fn parallel(
    cfg: &RunConfig,
    model: &GptConfig,
    method: &Method,
    workers: usize,
    mpi: bool,
    threads: bool,
) -> Result<Estimate> {
    let n = ParamLayout::new(model).len;
    let c = Costing {
        params: n,
        tokens_per_micro_batch: cfg.train.batch_size * cfg.seq_len(model),
        // The topology alone matters here (a SimSpec::flat would allocate one speed per worker).
        spec: SimSpec {
            speeds: Vec::new(),
            topology: Topology { workers, per_node: workers, server: false },
            ..SimSpec::flat(0, 1.0, None)
        },
        wire: cfg.parallel.wire.unwrap_or_default(),
        grad_accum: cfg.train.grad_accum,
        grad_clip: cfg.train.grad_clip > 0.0,
        optimizer: cfg.optimizer.clone(),
        fixed_micro_batches: cfg.parallel.fixed_micro_batches,
        device_memory: None,
        precision: Precision::F32,
        layout: Some(ParamLayout::new(model)),
    };
    let (worker, server) = match method {
        Method::AsyncDiloco(s) => {
            let (w, srv) = crate::plan::async_diloco::memory(&s.diloco(), &c)?;
            (w, Some(srv))
        }
        m => (crate::plan::memory::memory(m, &c)?, None),
    };
    let nf = n as f64;
    let replicas = if mpi { 1.0 } else { workers as f64 };
    let with_server = server.filter(|_| !mpi);
    let part = |m: &MemoryBytes| (m.comm_buffers + m.optimizer + m.outer) as f64;
    let mut e = Estimate { parts: Vec::new(), fixes: Vec::new() };
    let each = worker.total() as f64 + micro_batch(cfg, model);
    let what = format!("{} worker{} x {} =", replicas, if replicas == 1.0 { "" } else { "s" }, gb(each));
    e.add(what, replicas * each, "fewer --workers, a smaller --batch-size or model");
    if let Some(srv) = &with_server {
        e.add("the parameter server".into(), srv.total() as f64, "a smaller model");
    }
    e.add("data".into(), data(cfg, model), "a smaller corpus");
    let parts = replicas * (part(&worker) + 4.0 * nf) + with_server.as_ref().map_or(0.0, part);
    e.add("a checkpoint".into(), parts + 4.0 * nf + 2.0 * (4.0 * nf).max(part(&worker)), "fewer --workers");
    e.add("the initial model".into(), 8.0 * nf, "a smaller model");
    let participants = replicas + f64::from(u8::from(with_server.is_some()));
    if threads {
        e.add("thread stacks".into(), 2.0 * participants * STACK, "fewer --workers");
    }
    e.add("the program".into(), BASE, "");
    Ok(sorted(e))
}

fn sorted(mut e: Estimate) -> Estimate {
    let mut both: Vec<_> = e.parts.drain(..).zip(e.fixes.drain(..)).collect();
    both.sort_by(|a, b| b.0 .1.total_cmp(&a.0 .1));
    (e.parts, e.fixes) = both.into_iter().unzip();
    e
}

/// Bytes as "3.4 GB" (decimal units, as `lowcomm plan` prints): the one
/// formatter the disk-full error uses too.
pub fn gb(bytes: f64) -> String {
    crate::util::fsio::human_bytes(bytes as u64)
}

/// Memory this process may still use, and what limits it.
#[derive(Clone, Debug, PartialEq)]
pub struct Available {
    pub bytes: f64,
    pub source: String,
}

/// What this process may still allocate (module docs); `None` when nothing
/// can be read (not Linux).
pub fn available() -> Option<Available> {
    if let Ok(v) = std::env::var("LOWCOMM_MEMORY_AVAILABLE") {
        let bytes = v.trim().parse::<f64>().ok().filter(|b| *b >= 0.0)?;
        return Some(Available { bytes, source: "LOWCOMM_MEMORY_AVAILABLE".into() });
    }
    let read = |p: &str| std::fs::read_to_string(p).ok();
    let mut all = Vec::new();
    if let Some(kb) = read("/proc/meminfo").and_then(|t| field_kb(&t, "MemAvailable:")) {
        all.push(Available { bytes: kb * 1024.0, source: "MemAvailable in /proc/meminfo".into() });
    }
    all.extend(read("/proc/self/cgroup").and_then(|t| cgroup(&t, Path::new("/sys/fs/cgroup"))));
    let limit = read("/proc/self/limits").and_then(|t| address_space_limit(&t));
    let mapped = read("/proc/self/status").and_then(|t| field_kb(&t, "VmSize:"));
    if let (Some(limit), Some(kb)) = (limit, mapped) {
        let bytes = (limit - kb * 1024.0).max(0.0);
        all.push(Available { bytes, source: "the address-space limit (ulimit -v) less what the process maps".into() });
    }
    all.into_iter().min_by(|a, b| a.bytes.total_cmp(&b.bytes))
}

/// `key   1234 kB` of /proc/meminfo or /proc/self/status, in kB.
fn field_kb(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// The soft "Max address space" of /proc/self/limits, if limited.
fn address_space_limit(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line.trim_start_matches("Max address space").split_whitespace().next()?.parse().ok()
}

/// The tightest cgroup memory limit less usage over the process's cgroup
/// and those above it (v2 and v1), under the cgroup mount `root`.
fn cgroup(proc_cgroup: &str, root: &Path) -> Option<Available> {
    let mut best: Option<Available> = None;
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
        let (base, max, used) = match controllers {
            "" => (root.to_path_buf(), "memory.max", "memory.current"),
            c if c.split(',').any(|c| c == "memory") => {
                (root.join("memory"), "memory.limit_in_bytes", "memory.usage_in_bytes")
            }
            _ => continue,
        };
        let own = base.join(path.trim_start_matches('/'));
        // Inside a container the process's path may not exist under the mount: its root is the cgroup.
        for dir in own.ancestors().take_while(|d| d.starts_with(&base)) {
            let num = |f: &str| std::fs::read_to_string(dir.join(f)).ok()?.trim().parse::<f64>().ok();
            // v1 writes "no limit" as a number near 2^63.
            let (Some(limit), Some(usage)) = (num(max).filter(|l| *l < 1e18), num(used)) else { continue };
            let a = Available {
                bytes: (limit - usage).max(0.0),
                source: format!("the cgroup limit {} less its usage", dir.join(max).display()),
            };
            if best.as_ref().is_none_or(|b| a.bytes < b.bytes) {
                best = Some(a);
            }
        }
    }
    best
}

/// Refuses a run whose estimate `e` (with the margin) exceeds what is
/// available, naming both and what to change; with `yes`, a warning.
pub fn check(e: &Estimate, yes: bool) -> Result<()> {
    let Some(avail) = available() else { return Ok(()) };
    check_against(e, &avail, yes)
}

fn check_against(e: &Estimate, avail: &Available, yes: bool) -> Result<()> {
    if e.need() <= avail.bytes {
        return Ok(());
    }
    let parts: Vec<String> = e.parts.iter().filter(|(_, b)| *b > 0.0).map(|(w, b)| format!("{w} {}", gb(*b))).collect();
    let fix = e.fixes.iter().find(|f| !f.is_empty()).copied().unwrap_or("a smaller run");
    let say = format!(
        "this run needs about {} of memory ({}; estimate {} + {:.0}%), and this machine has {} available ({})",
        gb(e.need()),
        parts.join(", "),
        gb(e.total()),
        100.0 * MARGIN,
        gb(avail.bytes),
        avail.source
    );
    if yes {
        eprintln!("warning: {say}; starting anyway (--yes)");
        return Ok(());
    }
    bail!("{say}: use {fix}, or free memory; --yes starts it anyway (it may then abort)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_over_the_limit_is_refused_with_both_numbers_and_the_fix() {
        let mut cfg = RunConfig::default();
        cfg.train.batch_size = 100_000_000;
        let model = cfg.validate().unwrap();
        let e = single(&cfg, &model).unwrap();
        // Activations lead: 1e8 x 64 rows of nano.
        assert_eq!(e.parts[0].0, "activations");
        assert_eq!(e.parts[0].1, Activations::bytes_for(&model, 100_000_000, 64) + 8.0 * 64e8);
        let avail = Available { bytes: 3.2e9, source: "a test".into() };
        let err = check_against(&e, &avail, false).unwrap_err().to_string();
        assert!(err.starts_with(&format!("this run needs about {} of memory (activations", gb(e.need()))), "{err}");
        assert!(err.contains("this machine has 3.2 GB available (a test)") && err.contains("--batch-size"), "{err}");
        check_against(&e, &avail, true).unwrap();
        check_against(&e, &Available { bytes: 1e15, source: "big".into() }, false).unwrap();
    }

    #[test]
    fn workers_multiply_the_replica_and_mpi_holds_one() {
        let cfg = RunConfig::default();
        let model = cfg.validate().unwrap();
        let one = parallel(&cfg, &model, &Method::Ddp, 1000, false, false).unwrap();
        let mpi = parallel(&cfg, &model, &Method::Ddp, 1000, true, true).unwrap();
        let worker = |e: &Estimate| e.parts.iter().find(|(w, _)| w.contains("worker")).unwrap().1;
        assert_eq!(worker(&one), 1000.0 * worker(&mpi));
        assert_eq!(one.fixes[0], "fewer --workers, a smaller --batch-size or model");
        // ddp on nano: 4 copies of n (params, grads, AdamW m and v) and a micro-batch per worker.
        let n = ParamLayout::new(&model).len as f64;
        assert_eq!(worker(&mpi), 16.0 * n + micro_batch(&cfg, &model));
    }

    #[test]
    fn limits_are_read_from_the_kernel_files() {
        assert_eq!(field_kb("MemTotal: 10 kB\nMemAvailable:   2048 kB\n", "MemAvailable:"), Some(2048.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax address space         3276800000           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(3_276_800_000.0));
        assert_eq!(address_space_limit(&limits.replace("3276800000", "unlimited")), None);
        // A v2 hierarchy with a limit one level up, and a v1 one without a limit.
        let tmp = tempfile::tempdir().unwrap();
        let (v2, v1) = (tmp.path().join("a/b"), tmp.path().join("memory/x"));
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(tmp.path().join("a/memory.max"), "1000000000\n").unwrap();
        std::fs::write(tmp.path().join("a/memory.current"), "400000000\n").unwrap();
        std::fs::write(v2.join("memory.max"), "max\n").unwrap();
        std::fs::write(v1.join("memory.limit_in_bytes"), "9223372036854771712\n").unwrap();
        std::fs::write(v1.join("memory.usage_in_bytes"), "5\n").unwrap();
        let got = cgroup("0::/a/b\n4:memory:/x\n", tmp.path()).unwrap();
        assert_eq!(got.bytes, 6e8);
        assert!(got.source.contains("a/memory.max"), "{}", got.source);
        assert_eq!(cgroup("4:memory:/x\n", tmp.path()), None);
    }
}
