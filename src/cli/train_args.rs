//! The flags of `lowcomm train` (also taken by `compare` and `tune`, which
//! run trainings): one field per flag, each overriding its config key
//! (`train_config.rs` applies them; every key: configs/README.md).

use super::{precision_parser, shape, values};
use crate::model::{ComputeDevice, ComputePrecision};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct TrainArgs {
    /// TOML run configuration (every key: configs/README.md). Flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Model preset: nano, micro, small, llama-nano, llama-micro, llama-small, gpt2 (124M, for accelerators).
    #[arg(long)]
    pub preset: Option<String>,
    // Shape flags over the preset's (--arch, --vocab-size, --n-layer, --n-embd,
    // --n-head, --n-kv-head, --ctx).
    #[command(flatten)]
    pub shape: shape::ShapeArgs,
    /// Total optimizer steps.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub steps: Option<u64>,
    /// Sequences per micro-batch.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub batch_size: Option<usize>,
    /// Micro-batches per optimizer step.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub grad_accum: Option<usize>,
    /// Tokens per sequence (default: the model's context).
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub seq_len: Option<usize>,
    /// Peak learning rate.
    #[arg(long, allow_negative_numbers = true, value_parser = values::learning_rate)]
    pub lr: Option<f32>,
    /// Seed of initialisation, data order and dropout.
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub seed: Option<u64>,
    /// Prepared corpus directory.
    #[arg(long, value_parser = values::Utf8Path)]
    pub data: Option<PathBuf>,
    /// Run directory [default: runs/PRESET]. One run at a time: a run holds
    /// its directory's lock (RUN/.lock) while it trains.
    #[arg(long, value_parser = values::Utf8Path)]
    pub out: Option<PathBuf>,
    /// Start from the model of this run (its latest checkpoint) or
    /// checkpoint, same shape and tokenizer; optimizer and steps start fresh.
    #[arg(long, value_parser = values::Utf8Path)]
    pub init_from: Option<PathBuf>,
    /// Start from a local Hugging Face GPT-2 or Llama directory (config.json +
    /// model.safetensors, e.g. from `export --hf` or `save_pretrained`): its
    /// shape must be the run's (--n-layer ...) and its vocabulary the corpus'.
    #[arg(long, value_parser = values::Utf8Path, conflicts_with = "init_from")]
    pub init_from_hf: Option<PathBuf>,
    /// Where the model's forward and backward run: native (lowcomm's CPU
    /// kernels, default), cpu (libtorch), cuda or cuda:N (libtorch; workers
    /// spread over the GPUs). libtorch needs a build with --features torch
    /// (docs/torch.md).
    #[arg(long)]
    pub device: Option<ComputeDevice>,
    /// Precision of the model's math: f32 (default) or bf16 (libtorch
    /// devices only: bf16 forward and backward, f32 master weights and
    /// optimizer; docs/torch.md).
    #[arg(long, value_parser = precision_parser())]
    pub precision: Option<ComputePrecision>,
    /// Evaluate every N steps.
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub eval_every: Option<u64>,
    /// Checkpoint every N steps (rounds) and at the end; 0: only at the end
    /// [default: 100; async-diloco, demo/flexdemo --overlap and --faults: 0].
    /// Ctrl-C (SIGINT, SIGTERM) always stops at the next round with a checkpoint.
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub checkpoint_every: Option<u64>,
    /// Continue from a checkpoint: a run directory (its latest) or a
    /// checkpoints/step-N directory; without a value, the run's --out.
    // `Option<Option<_>>`: clap's flag with an optional value. An empty
    // default_missing_value, as before, failed PathBuf's parser, so
    // `--resume` alone was refused with "a value is required".
    #[arg(long, num_args = 0..=1, value_parser = values::Utf8Path)]
    pub resume: Option<Option<PathBuf>>,
    /// Stop after this step (with a checkpoint), keeping the schedule of
    /// --steps: from the step after the one the run is at, up to --steps.
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub stop_at: Option<u64>,
    /// No progress output.
    #[arg(long)]
    pub quiet: bool,
    /// Start over in an --out directory that already holds a run, replacing
    /// its metrics, checkpoints and config (without it, that is refused).
    #[arg(long)]
    pub force: bool,
    /// Start even when the run is estimated not to fit in memory, or one
    /// round to take more than an hour (--link, --speeds): both are refused
    /// without it (docs/design.md, "Checks before a run starts").
    #[arg(long)]
    pub yes: bool,
    /// Data-parallel method: ddp, zero1, dpu, acco-wp, acco, local-sgd,
    /// overlap-local-sgd, slowmo, co2, demo, flexdemo, diloco, async-diloco, streaming-diloco.
    /// Without it (and without parallel.method in --config), any of
    /// --workers, --nodes, --runtime, --backend, --cluster, --link, --speeds,
    /// --wire and --trace runs ddp; with none of them, the run is a single
    /// process. A method's own flags (--fixed-micro-batches and those after
    /// it) are refused unless the run's method takes them.
    #[arg(long)]
    pub method: Option<String>,
    /// Number of data-parallel workers (at least 1).
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub workers: Option<usize>,
    /// Nodes the workers are spread over (equally); FlexDeMo shards inside
    /// a node and replicates across nodes. Default: the cluster profile's, else 1.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub nodes: Option<usize>,
    /// `real` (threads, overlapping) or `sim` (deterministic virtual time).
    #[arg(long)]
    pub runtime: Option<String>,
    /// `local` (workers are threads of this process) or `mpi` (one process
    /// per worker: `mpirun -np 4 lowcomm train --backend mpi ...`; build
    /// with `--features mpi`; docs/mpi.md).
    #[arg(long)]
    pub backend: Option<String>,
    /// Simulated cluster profile (configs/clusters/*.toml), with --runtime sim;
    /// its links are its own (not with --link).
    #[arg(long, value_parser = values::Utf8Path)]
    pub cluster: Option<PathBuf>,
    /// One flat link to emulate (real) or simulate (sim), e.g. 1gbit,50us or
    /// 25GB/s,2us; with --nodes, INSIDE/BETWEEN nodes, e.g. 25gbit,5us/1gbit,10ms
    /// (the second per node); not with --cluster, whose profile has its own links.
    #[arg(long)]
    pub link: Option<String>,
    /// Speed factor per worker, e.g. 1,1,1,0.25 (a 4x slower fourth worker).
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = values::finite_f64)]
    pub speeds: Option<Vec<f64>>,
    /// Wire dtype of the collectives: f32 or bf16.
    #[arg(long)]
    pub wire: Option<String>,
    /// Write a Chrome/Perfetto trace of compute and communication per worker.
    #[arg(long, value_parser = values::Utf8Path)]
    pub trace: Option<PathBuf>,
    /// dpu, acco-wp, acco: exactly K micro-batches per stage, then wait for
    /// the round (results independent of timing) instead of accumulating
    /// while it is in flight.
    #[arg(long, value_name = "K", allow_negative_numbers = true, value_parser = values::count_usize)]
    pub fixed_micro_batches: Option<usize>,
    /// dpu, acco-wp, acco: what --steps buys: `rounds` (steps rounds of as
    /// many micro-batches as fit; train's default) or `tokens` (the tokens
    /// of steps synchronous steps, what every other method trains;
    /// compare's default).
    #[arg(long, value_parser = ["rounds", "tokens"])]
    pub budget: Option<String>,
    /// DPU: steps of non-delayed updates first.
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub dpu_warmup: Option<u64>,
    /// demo, flexdemo: the replicator: demo, random, striding, diloco, full,
    /// striding-element or diloco-delta (docs/methods.md).
    #[arg(long)]
    pub replicator: Option<String>,
    /// demo, flexdemo: bytes sent per step over bytes of the f32 gradient, in (0, 1].
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub compression: Option<f64>,
    /// demo, flexdemo: the inner optimizer of step 9: sgd or decoupled-adamw.
    #[arg(long)]
    pub inner: Option<String>,
    /// demo, flexdemo: exchange step t while step t+1 computes (applied one step late).
    #[arg(long)]
    pub overlap: bool,
    /// local-sgd, overlap-local-sgd, slowmo, co2: inner steps per outer round [default: 12].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub tau: Option<u64>,
    /// slowmo, co2, diloco, async-diloco, streaming-diloco: outer learning rate, > 0 [default: 1.0; co2 0.5; diloco 0.7;
    /// async-diloco 0.2 with nesterov or sgd-momentum, else 0.7].
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub outer_lr: Option<f64>,
    /// slowmo, co2, diloco, async-diloco, streaming-diloco: outer momentum beta, in [0, 1) [default: 0.5; co2 0; diloco 0.9];
    /// not with --outer sgd (no momentum).
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub outer_momentum: Option<f64>,
    /// co2: staleness gap penalty, on or off [default: on].
    #[arg(long, value_name = "on|off", allow_negative_numbers = true, value_parser = values::on_off)]
    pub penalty: Option<bool>,
    /// co2: outer momentum clipping threshold phi > 0, or off [default: 0.1].
    #[arg(long, value_name = "PHI|off", allow_negative_numbers = true, value_parser = values::clip_or_off)]
    pub outer_clip: Option<values::ClipArg>,
    /// overlap-local-sgd: pull toward the anchor, in (0, 1] [default: 0.5].
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub pull: Option<f64>,
    /// co2: shard the outer state ZeRO-style (reduce-scatter, outer step on the slice, all-gather).
    #[arg(long)]
    pub shard_outer: bool,
    /// local-sgd: inner optimizer state at a sync: keep, reset or average [default: keep].
    #[arg(long)]
    pub inner_state: Option<String>,
    /// diloco, async-diloco, streaming-diloco: inner steps per outer round H [default: 50; streaming-diloco 100].
    #[arg(long = "h", value_name = "H", allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub h: Option<u64>,
    /// diloco, async-diloco, streaming-diloco: outer optimizer: nesterov, sgd, sgd-momentum or dn (Delayed Nesterov) [default: nesterov].
    #[arg(long)]
    pub outer: Option<String>,
    /// diloco, async-diloco with --outer dn: Delayed Nesterov's buffer size N >= 1 [default: the number of workers].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub dn_buffer: Option<u64>,
    /// diloco, async-diloco with --outer dn: momentum activation c in [0, 1/N] [default: 0].
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub dn_c: Option<f64>,
    /// async-diloco: grace period in seconds (virtual under sim), >= 0: how long the server
    /// waits for more updates before handing out the new model [default: auto: 0, with --dylu
    /// one inner step of the slowest worker].
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub grace: Option<f64>,
    /// async-diloco: weight of each arriving pseudo-gradient in the outer step: 1/k, sqrt(k)/k, 1
    /// or auto, k the workers [default: auto: 1/k, 1 with --outer dn].
    #[arg(long, value_name = "1/k|sqrt(k)/k|1|auto")]
    pub weight: Option<String>,
    /// async-diloco: Dynamic Local Updates: each worker's steps per round in proportion to its speed.
    #[arg(long)]
    pub dylu: bool,
    /// async-diloco: data shards the server samples rounds from (eq. 2), each with its own
    /// lr schedule, >= 1 [default: one per worker].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub shards: Option<u64>,
    /// async-diloco: worker i always trains on shard i (no eq. 2 draw; shards = workers).
    #[arg(long)]
    pub fixed_shards: bool,
    /// async-diloco: workers that crash and rejoin, WORKER:crash@SECONDS and WORKER:join@SECONDS
    /// (virtual seconds under sim, wall seconds from the start on threads), e.g. 2:crash@120,2:join@300.
    #[arg(long, value_name = "PLAN")]
    pub faults: Option<String>,
}
