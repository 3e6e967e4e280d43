//! From `train`'s flags to a run configuration: the config file (or the
//! resumed run's own), then each flag on top, then the check that every
//! flag given can take effect ([`super::flag_rules`]). `compare` builds
//! each method's run from the same flags ([`flags_for`]).

use super::flag_rules::method_flags;
use super::TrainArgs;
use crate::model::GptConfig;
use crate::train::rundir::{self, Resume};
use crate::train::RunConfig;
use anyhow::Result;
use std::path::PathBuf;

/// The run configuration: the config file, else (when resuming) the
/// run's own, else the defaults; then the flags on top. When resuming,
/// also the run it continues (in its own directory; see
/// [`crate::train::rundir`]). Paths the run depends on are made absolute.
/// A flag the run would ignore is refused ([`super::flag_rules`]).
pub(super) fn run_config(a: &TrainArgs) -> Result<(RunConfig, Option<Resume>)> {
    run_config_with(a, &[])
}

/// [`run_config`] with `settings` put into the method's `[methods.NAME]`
/// section over the flags before they are checked (`compare`'s
/// `NAME:key=value` variants: `diloco:outer=dn` makes `--dn-c` apply).
pub(super) fn run_config_with(
    a: &TrainArgs,
    settings: &[(String, toml::Value)],
) -> Result<(RunConfig, Option<Resume>)> {
    let (mut cfg, resume) = configure(a)?;
    if !settings.is_empty() {
        let name = cfg.parallel.method.clone().unwrap_or_else(|| "ddp".into());
        let section = cfg.methods.entry(name).or_default();
        section.extend(settings.iter().cloned());
    }
    super::flag_rules::check(a, &cfg)?;
    Ok((cfg, resume))
}

/// [`run_config`] before its flags are checked.
fn configure(a: &TrainArgs) -> Result<(RunConfig, Option<Resume>)> {
    let base = match &a.config {
        Some(path) => RunConfig::from_file(path)?,
        None => RunConfig::default(),
    };
    // A run training in the directory to resume is the first thing to say (train/lock.rs).
    if let Some(Some(path)) = &a.resume {
        crate::train::lock::check_free(path)?;
    }
    let Some(r) = &a.resume else {
        let mut cfg = apply_flags(base, a)?;
        rundir::record_paths(&mut cfg);
        return Ok((cfg, None));
    };
    // `--resume` without a value: the run in --out (or the config's out_dir).
    let arg = match r {
        Some(path) => path.clone(),
        None => apply_flags(base.clone(), a)?.train.out_dir,
    };
    let resume = rundir::resolve_resume(&arg, a.out.as_deref())?;
    let saved = if a.config.is_some() { base } else { resume.config.clone() };
    let mut cfg = apply_flags(saved, a)?;
    resume.bind(&mut cfg, a.data.is_some())?;
    Ok((cfg, Some(resume)))
}

/// `cfg` with the command-line flags applied.
fn apply_flags(mut cfg: RunConfig, a: &TrainArgs) -> Result<RunConfig> {
    if let Some(p) = &a.preset {
        GptConfig::preset(p)?;
        cfg.model.preset = Some(p.clone());
        if a.out.is_none() && a.config.is_none() {
            cfg.train.out_dir = PathBuf::from(format!("runs/{p}"));
        }
    }
    // Shape flags override the preset's fields (and the config's [model]).
    a.shape.over_section(&mut cfg.model);
    let t = &mut cfg.train;
    macro_rules! set {
        ($flag:expr, $field:expr) => {
            if let Some(v) = $flag.clone() {
                $field = v;
            }
        };
    }
    set!(a.steps, t.steps);
    set!(a.batch_size, t.batch_size);
    set!(a.grad_accum, t.grad_accum);
    set!(a.seed, t.seed);
    set!(a.out, t.out_dir);
    set!(a.eval_every, t.eval_every);
    if a.init_from.is_some() {
        t.init_from = a.init_from.clone();
    }
    if a.init_from_hf.is_some() {
        t.init_from_hf = a.init_from_hf.clone();
    }
    set!(a.device, t.device);
    set!(a.precision, t.precision);
    if a.checkpoint_every.is_some() {
        t.checkpoint_every = a.checkpoint_every;
    }
    if a.seq_len.is_some() {
        t.seq_len = a.seq_len;
    }
    set!(a.lr, cfg.schedule.max_lr);
    if a.data.is_some() {
        cfg.data.dir = a.data.clone();
    }
    let p = &mut cfg.parallel;
    if a.method.is_some() {
        p.method = a.method.clone();
    }
    if a.workers.is_some() {
        p.workers = a.workers;
    }
    set!(a.runtime, p.runtime);
    set!(a.backend, p.backend);
    if a.cluster.is_some() {
        p.cluster = a.cluster.clone();
    }
    if a.link.is_some() {
        p.link = a.link.clone();
    }
    if a.speeds.is_some() {
        p.speeds = a.speeds.clone();
    }
    if let Some(w) = &a.wire {
        p.wire = Some(match w.as_str() {
            "f32" => crate::comm::WireDtype::F32,
            "bf16" => crate::comm::WireDtype::Bf16,
            other => anyhow::bail!("unknown wire dtype `{other}`: use --wire f32 or --wire bf16"),
        });
    }
    if a.trace.is_some() {
        p.trace = a.trace.clone();
    }
    if let Some(f) = &a.faults {
        cfg.faults.plan = f.clone();
    }
    // Method flags set keys of the chosen method's section; one the method
    // does not take is refused by flag_rules::check, naming the flag.
    let name = p.method.clone().unwrap_or_else(|| "ddp".into());
    for (key, value) in method_flags(a) {
        cfg.methods.entry(name.clone()).or_default().insert(key.into(), value);
    }
    let p = &mut cfg.parallel;
    if a.nodes.is_some() {
        p.nodes = a.nodes;
    }
    if a.fixed_micro_batches.is_some() {
        p.fixed_micro_batches = a.fixed_micro_batches;
    }
    if let Some(b) = &a.budget {
        p.budget = if b == "tokens" {
            crate::train::config::BudgetUnit::Tokens
        } else {
            crate::train::config::BudgetUnit::Rounds
        };
    }
    // Any data-parallel flag makes the run data-parallel (ddp unless
    // --method says otherwise), as `train --help` says under --method.
    // Before, --trace, --wire and --nodes were ignored on a single-process run.
    if p.method.is_none()
        && (a.workers.is_some()
            || a.nodes.is_some()
            || a.runtime.is_some()
            || a.backend.is_some()
            || a.cluster.is_some()
            || a.link.is_some()
            || a.speeds.is_some()
            || a.wire.is_some()
            || a.trace.is_some())
    {
        p.method = Some("ddp".into());
    }
    // A data-parallel run of a preset goes to runs/PRESET-METHOD by default,
    // so it does not collide with the single-worker run in runs/PRESET (the
    // quickstart's) or with another method's.
    if let (Some(preset), Some(method), None, None) = (&a.preset, &p.method, &a.out, &a.config) {
        cfg.train.out_dir = PathBuf::from(format!("runs/{preset}-{method}"));
    }
    Ok(cfg)
}

/// For one method of `lowcomm compare`: `a` without the method flags
/// `method` does not take (`--tau` applies to the local-update methods
/// only). Errors when a flag is taken by none of `methods`.
pub(super) fn flags_for(a: &TrainArgs, method: &str, methods: &[String]) -> Result<TrainArgs> {
    use super::flag_rules::{applies, given};
    use crate::strategy::method_spec::{flag_of, refuse_unused_flag};
    let mut out = a.clone();
    for key in given(a) {
        // Shared with `plan`: a flag no listed method takes is refused, naming the methods that take it.
        refuse_unused_flag(&flag_of(key), |m| applies(key, m), methods)?;
        if !applies(key, method) {
            match key {
                "warmup_steps" => out.dpu_warmup = None,
                "tau" => out.tau = None,
                "outer_lr" => out.outer_lr = None,
                "outer_momentum" => out.outer_momentum = None,
                "penalty" => out.penalty = None,
                "clip" => out.outer_clip = None,
                "pull" => out.pull = None,
                "shard_outer" => out.shard_outer = false,
                "inner_state" => out.inner_state = None,
                "replicator" => out.replicator = None,
                "compression" => out.compression = None,
                "inner" => out.inner = None,
                "overlap" => out.overlap = false,
                "h" => out.h = None,
                "outer" => out.outer = None,
                "dn_buffer" => out.dn_buffer = None,
                "dn_c" => out.dn_c = None,
                "grace" => out.grace = None,
                "weight" => out.weight = None,
                "dylu" => out.dylu = false,
                "shards" => out.shards = None,
                "fixed_shards" => out.fixed_shards = false,
                "fixed_micro_batches" => out.fixed_micro_batches = None,
                "budget" => out.budget = None,
                other => unreachable!("method flag {other} has no field"),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{train_args, Cli};
    use super::*;
    use clap::Parser;

    #[test]
    fn a_data_parallel_preset_run_defaults_to_runs_preset_method() {
        let out = |args: &[&str]| run_config_with(&train_args(args), &[]).unwrap().0.train.out_dir;
        // The quickstart's single-worker run and a data-parallel one do not meet.
        assert_eq!(out(&["--preset", "nano"]), PathBuf::from("runs/nano"));
        assert_eq!(out(&["--preset", "nano", "--method", "acco"]), PathBuf::from("runs/nano-acco"));
        assert_eq!(out(&["--preset", "nano", "--workers", "2"]), PathBuf::from("runs/nano-ddp"));
        assert_eq!(out(&["--preset", "nano", "--method", "acco", "--out", "x"]), PathBuf::from("x"));
    }

    #[test]
    fn init_from_hf_sets_its_key_and_not_next_to_init_from() {
        let t = run_config_with(&train_args(&["--init-from-hf", "hf/gpt2"]), &[]).unwrap().0.train;
        assert_eq!((t.init_from_hf, t.init_from), (Some(PathBuf::from("hf/gpt2")), None));
        let both = ["lowcomm", "train", "--init-from-hf", "a", "--init-from", "b"];
        let e = Cli::try_parse_from(both).unwrap_err().to_string();
        assert!(e.contains("--init-from-hf") && e.contains("cannot be used with"), "{e}");
    }

    #[test]
    fn shape_flags_override_the_preset_and_a_bad_shape_names_its_field() {
        let model = |args: &[&str]| run_config_with(&train_args(args), &[]).and_then(|(c, _)| c.model.resolve());
        let m = model(&["--preset", "micro", "--vocab-size", "512", "--n-layer", "2", "--ctx", "32"]).unwrap();
        let micro = GptConfig::preset("micro").unwrap();
        assert_eq!((m.vocab_size, m.n_layer, m.ctx), (512, 2, 32));
        assert_eq!((m.n_embd, m.n_head), (micro.n_embd, micro.n_head));
        let m = model(&["--n-embd", "96", "--n-head", "3"]).unwrap();
        assert_eq!((m.n_embd, m.n_head), (96, 3));
        let e = model(&["--n-embd", "100", "--n-head", "3"]).unwrap_err().to_string();
        assert!(e.contains("model.n_embd (100) must be a multiple of model.n_head (3)") && !e.contains('\n'), "{e}");
        assert!(Cli::try_parse_from(["lowcomm", "train", "--n-layer", "0"]).is_err());
    }
}
