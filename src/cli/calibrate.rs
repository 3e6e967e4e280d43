//! `lowcomm calibrate`: measures this machine (and under `mpirun` the links
//! between its ranks) and writes a cluster profile (src/calibrate/).

use super::values;
use crate::calibrate::{self, Calibration, Options};
use crate::model::GptConfig;
use crate::runtime::cluster::ClusterProfile;
use crate::train::config::TrainSection;
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// The cluster profile to write (configs/clusters/README.md).
    #[arg(long, value_parser = values::Utf8Path)]
    pub out: PathBuf,
    /// Replace --out if it exists.
    #[arg(long)]
    pub force: bool,
    /// Model preset timed: nano, micro, small, llama-nano, llama-micro, llama-small, gpt2 [default: train's, nano].
    #[arg(long)]
    pub preset: Option<String>,
    /// Sequences per micro-batch [default: train's, 16].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub batch_size: Option<usize>,
    /// Tokens per sequence [default: the model's context].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub seq_len: Option<usize>,
    /// Workers per node, all computing at once while timed (threads) [default: 1;
    /// under mpirun the ranks sharing a node, and not settable].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub workers_per_node: Option<usize>,
    /// Nodes of the profile [default: 1; under mpirun the job's]. In-process, needs --inter.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub nodes: Option<usize>,
    /// Timed repetitions of each kind of work per worker (the median is kept);
    /// micro-batches take 3x as many, in a row, for their lag-1 correlation.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub repeats: usize,
    /// Untimed repetitions first.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true, value_parser = values::count_usize)]
    pub warmup: usize,
    /// Largest message of the link sweeps, bytes (sizes 4 B, 16 B, ... x4 up to it) [default: 64 MiB].
    #[arg(long, default_value_t = 64 << 20, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub max_bytes: usize,
    /// Link inside a node, used as given instead of measured, e.g. 300GB/s,3us.
    #[arg(long)]
    pub intra: Option<String>,
    /// Link between nodes, used as given instead of measured, e.g. 10gbit,50us
    /// (in-process it cannot be measured: required with --nodes > 1).
    #[arg(long)]
    pub inter: Option<String>,
    /// The profile's name [default: from the shape and backend].
    #[arg(long)]
    pub name: Option<String>,
    /// `local` (threads of this process) or `mpi` (this job's ranks:
    /// `mpirun -np 4 lowcomm calibrate --backend mpi --out F`).
    #[arg(long, default_value = "local")]
    pub backend: String,
}

/// The options of `a`, defaults as `train` (preset nano, 16 sequences of the model's context).
fn options(a: &CalibrateArgs) -> Result<Options> {
    let preset = a.preset.clone().unwrap_or_else(|| "nano".into());
    let model = GptConfig::preset(&preset)?;
    let seq = a.seq_len.unwrap_or(model.ctx);
    if seq > model.ctx {
        bail!(
            "--seq-len {seq} is longer than {preset}'s context ({}); give at most --seq-len {}",
            model.ctx,
            model.ctx
        );
    }
    Ok(Options {
        preset,
        seq,
        batch: a.batch_size.unwrap_or(TrainSection::default().batch_size),
        model,
        workers_per_node: a.workers_per_node.unwrap_or(1),
        nodes: a.nodes.unwrap_or(1),
        repeats: a.repeats,
        warmup: a.warmup,
        max_bytes: a.max_bytes,
        intra: a.intra.clone(),
        inter: a.inter.clone(),
        name: a.name.clone(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    })
}

/// Runs `lowcomm calibrate`.
pub fn calibrate(a: &CalibrateArgs) -> Result<()> {
    if a.out.exists() && !a.force {
        bail!("{} exists; give another --out or --force to replace it", a.out.display());
    }
    let opts = options(a)?;
    let cal = match a.backend.as_str() {
        "local" => Some(calibrate::run_local(&opts)?),
        "mpi" => run_mpi(&opts, a)?,
        other => bail!("unknown backend `{other}`: use --backend local (threads) or --backend mpi (under mpirun)"),
    };
    match cal {
        Some(c) => write(a, &c),
        None => Ok(()),
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(opts: &Options, a: &CalibrateArgs) -> Result<Option<Calibration>> {
    calibrate::mpi::run_mpi(opts, a.workers_per_node, a.nodes)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: &Options, _: &CalibrateArgs) -> Result<Option<Calibration>> {
    bail!("this lowcomm was built without MPI: install MPICH and libclang (apt-get install libmpich-dev mpich libclang-dev), then cargo build --release --features mpi (docs/mpi.md)")
}

/// Writes the profile, reads it back as `plan` and `sim` will, and says what it holds.
fn write(a: &CalibrateArgs, c: &Calibration) -> Result<()> {
    calibrate::progress(3, &format!("writing {}", a.out.display()));
    let text = calibrate::profile::render(c);
    crate::util::fsio::atomic_write(&a.out, text.as_bytes())
        .with_context(|| format!("cannot write {}", a.out.display()))?;
    // Reading it back says its `# WARNING:` comments on stderr (the host's
    // drift, an overlap factor from too few samples), as plan will.
    let p = ClusterProfile::from_file(&a.out)?;
    let spec = p.sim_spec(&c.opts.model, c.compute.params, c.opts.batch * c.opts.seq, vec![1.0; p.workers()])?;
    let link = p.link_model()?;
    println!(
        "wrote {}: {} node(s) x {} workers; micro-batch {:.2} ms with all {} local workers computing at once; memory bandwidth {:.2} GB/s; DCT {:.2} GFLOP/s; intra {}{}",
        a.out.display(),
        p.nodes,
        p.workers_per_node,
        spec.micro_batch_s * 1e3,
        p.workers_per_node,
        spec.memory_bytes_per_s.unwrap_or(0.0) / 1e9,
        spec.flops_per_s.unwrap_or(0.0) / 1e9,
        calibrate::fit::tier_spec(&link.intra),
        link.inter.map(|t| format!(", inter {}", calibrate::fit::tier_spec(&t))).unwrap_or_default()
    );
    for (key, t) in [("intra", Some(&c.intra)), ("inter", c.inter.as_ref())] {
        match t {
            Some(calibrate::TierSource::Measured(m)) if !m.all_reduce.1.fits() => {
                println!("warning: the {key} link does not fit alpha-beta: {}", m.all_reduce.1.describe())
            }
            Some(calibrate::TierSource::Given { why, .. }) => println!("{key}: not measured ({why})"),
            _ => {}
        }
    }
    println!("use it: lowcomm plan --model {} --cluster {}", c.opts.preset, a.out.display());
    Ok(())
}
