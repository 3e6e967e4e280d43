//! What each subcommand does, in terms of the library.

use super::train_config::run_config;
use super::{BenchArgs, EvalArgs, ExportArgs, GenerateArgs, PrepareArgs, TrainArgs};
use crate::checkpoint;
use crate::data::{prepare::PrepareOptions, Dataset, Tokenizer};
use crate::model::{Gpt, GptConfig};
use crate::sample::{generate as sample, SampleOptions};
use crate::train::rundir::{self, Resume};
use crate::train::{config::default_data_dir, trainer::check_vocab, RunConfig, RunOptions};
use anyhow::Result;
use std::path::{Path, PathBuf};

/// "a, b, c and 4 more" for a list of names in an error.
fn summarize(names: &[String]) -> String {
    match names.len() {
        0..=4 => names.join(", "),
        n => format!("{} and {} more", names[..3].join(", "), n - 3),
    }
}

pub fn prepare(a: PrepareArgs) -> Result<()> {
    let tokenizer = a.tokenizer.as_deref().map(Tokenizer::load_external).transpose()?;
    let vocab = match (a.vocab_size, &tokenizer) {
        (Some(v), _) => v, // prepare refuses one that disagrees with --tokenizer
        (None, Some(t)) => t.vocab_size(),
        (None, None) => GptConfig::preset(&a.preset)?.vocab_size,
    };
    let out = a.out.unwrap_or_else(|| {
        if a.input.is_empty() {
            default_data_dir(vocab)
        } else {
            PathBuf::from(format!("data/custom-{vocab}"))
        }
    });
    let opts = PrepareOptions {
        inputs: a.input,
        out,
        vocab_size: vocab,
        val_fraction: a.val_fraction,
        cache_dir: a.cache_dir,
        force: a.force,
        tokenizer,
    };
    let report = crate::data::prepare(&opts)?;
    println!("{report}");
    Ok(())
}

pub fn train(a: TrainArgs) -> Result<()> {
    let (cfg, resume) = run_config(&a)?;
    // Ctrl-C stops at a round boundary with a checkpoint (train/interrupt.rs; MPI ranks vote on it).
    let handler = Some(crate::train::interrupt::Handler::install()?);
    let opts = RunOptions {
        resume: resume.as_ref().map(|r| r.checkpoint.clone()),
        stop_at: a.stop_at,
        quiet: a.quiet,
        force: a.force,
        stop: handler.as_ref().map(|h| h.flag()),
        yes: a.yes,
    };
    // Another run training there is the first thing to say (train/lock.rs).
    crate::train::lock::check_free(&cfg.train.out_dir)?;
    if cfg.parallel.method.is_some() {
        let mut runner = super::mpi::runner(&cfg.parallel.backend)?;
        // A bad setting is the first thing to say, before anything about the run directory.
        cfg.validate()?;
        let method = crate::train::parallel::method(&cfg)?;
        crate::train::parallel::fault_plan(&cfg, &method, resume.is_some())?;
        match &resume {
            // Refuse before any work. With --force the run replaces the old
            // one itself, once all its checks have passed (parallel::setup).
            None => drop(rundir::check_fresh(&cfg.train.out_dir, a.force)?),
            Some(r) => {
                if nothing_left(r, &cfg, a.stop_at, runner.root)? {
                    return Ok(());
                }
            }
        }
        let Some(s) = (runner.run)(cfg, &opts)? else {
            return Ok(()); // MPI ranks other than 0 report nothing
        };
        println!(
            "method {}  workers {}  final loss {:.4}  val_loss {:.4}  val_ppl {:.2}  time {:.2} s  overlap {}  checkpoint {}",
            s.method,
            s.world,
            s.final_loss,
            s.val_loss,
            s.val_loss.exp(),
            s.summary.wall_s,
            s.summary.overlap_ratio.map_or("-".into(), |o| format!("{:.0}%", 100.0 * o)),
            s.checkpoint.display()
        );
        return Ok(());
    }
    if !cfg.faults.is_empty() {
        anyhow::bail!("--faults / [faults] plan: a fault plan takes workers of a parallel run down: add --method async-diloco --workers 4, e.g. --faults 2:crash@120,2:join@300");
    }
    if resume.is_none() {
        // Fail fast; `run` replaces the old run (with --force) once the new one has started.
        rundir::check_fresh(&cfg.train.out_dir, a.force)?;
    }
    let summary = crate::train::run(cfg, &opts)?;
    let resumed = summary
        .resumed_from
        .as_ref()
        .map_or(String::new(), |(s, p)| format!("  (resumed from step {s}: {})", p.display()));
    println!(
        "step {}  tokens {}  val_loss {:.4}  val_ppl {:.2} ({} windows)  ({:.1} s)  checkpoint {}{resumed}",
        summary.steps,
        summary.tokens,
        summary.eval.val_loss,
        summary.eval.val_ppl,
        summary.eval_windows,
        summary.wall_s,
        summary.checkpoint.display()
    );
    Ok(())
}

/// Whether the data-parallel run `r` resumes is already at its last round
/// (saying so on the root process); refuses a `--steps` / `--stop-at` that
/// does not fit the run ([`crate::train::run::end_step`]).
fn nothing_left(r: &Resume, cfg: &RunConfig, stop_at: Option<u64>, root: bool) -> Result<bool> {
    let end = crate::train::run::end_step(r.step, cfg.train.steps, stop_at)?;
    if r.step < end {
        return Ok(false);
    }
    if root {
        let dir = rundir::shell_quote(&r.run_dir.display().to_string());
        println!(
            "nothing to do: the run in {} is already at round {} of {} (checkpoint {}); train it further with `lowcomm train --resume {dir} --steps {}`",
            r.run_dir.display(),
            r.step,
            cfg.train.steps,
            r.checkpoint.display(),
            2 * r.step.max(1)
        );
    }
    Ok(true)
}

/// Load what inference needs from `--ckpt`; a damaged optimizer file is a
/// warning, not an error (inference does not read it).
fn load_for_inference(ckpt: &Path) -> Result<checkpoint::Checkpoint> {
    let (ck, warning) = checkpoint::load_for_inference(ckpt)?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    Ok(ck)
}

pub fn eval(a: EvalArgs) -> Result<()> {
    let ck = load_for_inference(&a.ckpt)?;
    let run_cfg = rundir::saved_config(&a.ckpt, &ck.state)?;
    let model_cfg = ck.state.model.clone();
    let data_dir = a.data.unwrap_or_else(|| run_cfg.data_dir(&model_cfg));
    let data = Dataset::open(&data_dir)?;
    check_vocab(
        &model_cfg,
        data.tokenizer.vocab_size(),
        &format!("the tokenizer of {}", data_dir.display()),
        &data_dir,
    )?;
    let seq = run_cfg.seq_len(&model_cfg);
    data.check_context(seq)?;
    let mut model = Gpt::from_params(model_cfg, ck.params, 0)?;
    // The run's own evaluation settings by default, so this is the number
    // training printed for the same checkpoint.
    let windows = a.windows.unwrap_or(run_cfg.train.eval_windows);
    let batch = a.batch_size.unwrap_or(run_cfg.train.batch_size).max(1);
    let loss = crate::train::trainer::evaluate(&mut model, &data.val, seq, batch, windows);
    println!(
        "step {}  val_loss {:.4}  val_ppl {:.2} ({} windows)  ({} tokens each, from {})",
        ck.state.step,
        loss,
        loss.exp(),
        crate::data::eval_windows(&data.val, seq, windows).len(),
        seq,
        data_dir.display()
    );
    Ok(())
}

pub fn generate(a: GenerateArgs) -> Result<()> {
    let ck = load_for_inference(&a.ckpt)?;
    let tok = Tokenizer::from_json(&ck.tokenizer_json)?;
    let mut model = Gpt::from_params(ck.state.model.clone(), ck.params, 0)?;
    let mut prompt = tok.encode(&a.prompt);
    if prompt.is_empty() {
        prompt.push(tok.eot_id());
    }
    let opts = SampleOptions {
        max_tokens: a.tokens,
        temperature: a.temperature,
        top_k: a.top_k,
        seed: a.seed,
        stop_token: Some(tok.eot_id()),
    };
    let out = sample(&mut model, &prompt, &opts);
    println!("{}{}", a.prompt, tok.decode(&out));
    Ok(())
}

/// Text whose tokens the export check compares (any text works).
const REFERENCE_TEXT: &str = "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife. \
However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed in the minds of the surrounding families.";

pub fn export(a: ExportArgs) -> Result<()> {
    let existing = crate::util::fsio::dir_entries(&a.hf)?;
    if !existing.is_empty() && !a.force {
        anyhow::bail!(
            "{} is not empty ({}): pass --force to replace it, or choose another --hf directory",
            a.hf.display(),
            summarize(&existing)
        );
    }
    let ck = load_for_inference(&a.ckpt)?;
    if !existing.is_empty() {
        eprintln!("--force: replacing {} ({})", a.hf.display(), summarize(&existing));
    }
    // Written into a temporary directory renamed into place: a failed
    // export leaves nothing half-written (and, with --force, the old one).
    crate::util::fsio::write_dir_atomic(&a.hf, |dir| crate::export::hf::export(&ck, dir))?;
    let kind = match ck.state.model.arch {
        crate::model::Arch::Gpt2 => "GPT-2 (GPT2LMHeadModel)",
        crate::model::Arch::Llama => "Llama (LlamaForCausalLM)",
    };
    println!("wrote Hugging Face {kind} model to {}", a.hf.display());
    if let Some(path) = a.reference {
        let tok = Tokenizer::from_json(&ck.tokenizer_json)?;
        let mut ids = tok.encode(REFERENCE_TEXT);
        ids.truncate(ck.state.model.ctx);
        let v = ck.state.model.vocab_size;
        let mut model = Gpt::from_params(ck.state.model.clone(), ck.params.clone(), 0)?;
        let logits = model.logits(&ids, 1, ids.len()).to_vec();
        // Token ids as f32 are exact below 2^24.
        let ids_f: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
        checkpoint::write_f32_tensors(
            &path,
            &[("tokens", vec![ids.len()], &ids_f), ("logits", vec![ids.len(), v], &logits)],
        )?;
        println!("wrote reference logits for {} tokens to {}", ids.len(), path.display());
    }
    Ok(())
}

/// Refuses an unknown `--what`, and a flag of one `--what` given to
/// another (they were silently ignored).
fn check_bench_flags(a: &BenchArgs) -> Result<()> {
    const WHATS: [&str; 6] = ["step", "comm", "sim", "sim-parallel", "dct", "server"];
    if !WHATS.contains(&a.what.as_str()) {
        anyhow::bail!("unknown benchmark `{}`: use --what step, comm, sim, sim-parallel, dct or server", a.what);
    }
    let only = [
        (a.mib.is_some(), "--mib", "comm"),
        (a.backend.is_some(), "--backend", "comm"),
        (a.breakdown, "--breakdown", "step"),
        (!a.device.is_empty(), "--device", "step"),
        (a.precision.is_some(), "--precision", "step"),
        (a.batch.is_some(), "--batch", "step"),
    ];
    if let Some((_, flag, what)) = only.iter().find(|(given, _, what)| *given && *what != a.what) {
        anyhow::bail!("{flag} applies to --what {what} only, not to --what {}: drop it, or use --what {what}", a.what);
    }
    if a.warmup.is_some() && ["comm", "sim", "sim-parallel"].contains(&a.what.as_str()) {
        anyhow::bail!("--warmup applies to --what step, dct and server, not to --what {}: drop it", a.what);
    }
    Ok(())
}

/// Untimed steps before the timed ones, unless `--warmup` says otherwise.
const BENCH_WARMUP: usize = 3;

pub fn bench(a: BenchArgs) -> Result<()> {
    check_bench_flags(&a)?;
    let warmup = a.warmup.unwrap_or(BENCH_WARMUP);
    match a.what.as_str() {
        "step" => {}
        "comm" => {
            super::mpi::bench_collectives(&a)?;
            if a.backend() != "local" {
                return Ok(());
            }
            let mib = a.mib();
            for world in [2, 4] {
                let (ar, memcpy) = crate::comm::bench::bench_all_reduce(world, mib, a.steps);
                println!(
                    "RESULT all_reduce {mib}MiB workers={world} allreduce_GBps={ar:.2} memcpy_GBps={memcpy:.2} ratio={:.2} (bar >= 0.50)",
                    ar / memcpy
                );
            }
            return Ok(());
        }
        "sim" => {
            let (raw, sim) = crate::bench::sim_overhead(&a.preset, a.steps as u64)?;
            println!(
                "RESULT sim_overhead preset={} steps={} raw_s={raw:.3} sim_s={sim:.3} overhead={:.1}% (bar <= 10%)",
                a.preset,
                a.steps,
                100.0 * (sim / raw - 1.0)
            );
            return Ok(());
        }
        "sim-parallel" => {
            // Alternated twice: the fastest of two runs each.
            crate::bench::sim_parallel::run(a.steps as u64, 2)?;
            return Ok(());
        }
        "dct" => {
            let r = crate::bench::dct::run(&a.preset, a.steps, warmup)?;
            let demo = r.encode_s + r.decode_s;
            println!(
                "RESULT demo_dct preset={} params={} step_s={:.4} encode_s={:.4} decode_s={:.4} share={:.1}% (bar < 10% on micro) transform_gemm_s={:.4} transform_loops_s={:.4} loops/gemm={:.1}",
                a.preset,
                r.params,
                r.step_s,
                r.encode_s,
                r.decode_s,
                100.0 * demo / r.step_s,
                r.gemm_s,
                r.loops_s,
                r.loops_s / r.gemm_s
            );
            return Ok(());
        }
        "server" => {
            crate::bench::server::run(a.steps, warmup)?.iter().for_each(|l| println!("{l}"));
            return Ok(());
        }
        other => anyhow::bail!("unknown benchmark `{other}`: use --what step, comm, sim, sim-parallel, dct or server"),
    }
    let step = crate::bench::StepConfig {
        preset: a.preset.clone(),
        batch: a.batch,
        device: a.device.first().copied().unwrap_or_default(),
        precision: a.precision.unwrap_or_default(),
    };
    if a.device.len() > 1 {
        let results = crate::bench::devices::run(&step, a.steps, warmup, &a.device)?;
        crate::bench::devices::lines(&a.preset, &a.device, &results).iter().for_each(|l| println!("{l}"));
        return Ok(());
    }
    let device = step.device;
    device.check_available()?;
    step.precision.check_for(device)?;
    let host = crate::bench::breakdown::Host::probe()?;
    if a.breakdown {
        let (rows, step_s) = crate::bench::breakdown::run(&a.preset, a.steps, warmup)?;
        println!("Per-kernel time of one `{}` step (mean of {} profiled steps):\n", a.preset, a.steps);
        println!("{}", crate::bench::breakdown::table(&rows, step_s));
        let n = crate::model::ParamLayout::new(&crate::bench::bench_shape(&a.preset)?.0).len;
        let (lanes, one) = crate::bench::breakdown::norm_against_one_sum(n, 21);
        println!(
            "grad norm over {n} values (the clip's): {:.3} ms with eight running sums a chunk, {:.3} ms with one (baseline): {:.1}x\n",
            lanes * 1e3,
            one * 1e3,
            one / lanes
        );
    }
    let r = crate::bench::run(&step, a.steps, warmup)?;
    println!("{}", host.line(r.gflops));
    println!(
        "RESULT lib=lowcomm device={device} precision={} preset={} batch={}x{} params={} median_step_s={:.4} fwd_bwd_s={:.4} host_s={:.4} download_s={:.4} optimizer={} round_sync_s={:.4} tok_per_s={:.0} gflops={:.1} peak_rss_mb={:.0} loss_first={:.4} loss_last={:.4}",
        step.precision, r.preset, r.batch, r.seq, r.params, r.median_step_s, r.median_fwd_bwd_s, r.median_host_s, r.median_download_s, r.optimizer, r.round_sync_s, r.tokens_per_s, r.gflops, r.peak_rss_mb, r.loss_first, r.loss_last
    );
    Ok(())
}
