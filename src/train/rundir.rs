//! Run directories a user can trust: where `lowcomm train` writes, and how a
//! run is found again.
//!
//! - A fresh run never lands silently in a directory that already holds a
//!   run: [`check_fresh`] refuses (naming `--resume` and `--force`), and
//!   [`claim_fresh`] with `force` says what it replaces and removes it, so
//!   old checkpoints and metrics never mix with the new run's.
//! - `--resume RUN` continues *in* RUN, wherever RUN is now
//!   ([`resolve_resume`]): the `train.out_dir` saved in a run's config is a
//!   record of where it was first written and is ignored on resume, so a
//!   moved or copied run directory resumes into itself, never into whatever
//!   its old name points at.
//! - The paths a run depends on are recorded **absolute** in its saved
//!   config ([`record_paths`]): the data directory (which also holds the
//!   tokenizer; the checkpoint carries its own copy, checked against it on
//!   resume) and the cluster profile. Why absolute and not relative to the
//!   run directory: a prepared corpus is shared by many runs and stays where
//!   `data prepare` put it, while run directories are what users move, copy
//!   and archive; an absolute path survives all of that, a run-relative one
//!   breaks on every move. When the corpus itself has moved, the error names
//!   the recorded path and `--data` points the run at another copy.
//! - Configs saved before paths were recorded hold paths relative to the
//!   directory the run was started from; they are tried against the current
//!   directory, then against that directory as inferred from the run's
//!   location (RUN with its recorded `out_dir` taken off the end).

use super::config::RunConfig;
use crate::checkpoint;
use crate::model::GptConfig;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// What lowcomm writes into a run directory, and so what `--force`
/// replaces (anything else in the directory is left alone).
pub const RUN_FILES: &[&str] =
    &["config.toml", "metrics.jsonl", "checkpoints", "events.jsonl", "loss_vs_tokens.svg", "loss_vs_time.svg"];

/// What a directory holds of an earlier run.
#[derive(Clone, Debug)]
pub struct ExistingRun {
    /// The run directory.
    pub dir: PathBuf,
    /// Entries of [`RUN_FILES`] present in it.
    pub files: Vec<String>,
    /// Complete checkpoints, oldest first (`step-N` names).
    pub checkpoints: Vec<String>,
    /// Step of the newest checkpoint and the total steps of its schedule.
    pub progress: Option<(u64, u64)>,
    /// Lines in `metrics.jsonl`, and the last step it logged.
    pub metrics: Option<(usize, Option<u64>)>,
}

impl ExistingRun {
    /// One line: what is there (step, checkpoints, metrics).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some((step, total)) = self.progress {
            parts.push(format!("at step {step} of {total}"));
        }
        parts.push(match self.checkpoints.len() {
            0 => "no checkpoint".to_string(),
            _ => format!("checkpoints {}", self.checkpoints.join(", ")),
        });
        if let Some((lines, last)) = self.metrics {
            let to = last.map_or(String::new(), |s| format!(", to step {s}"));
            parts.push(format!("{lines} lines in metrics.jsonl{to}"));
        }
        parts.join("; ")
    }

    /// Remove the run's files ([`RUN_FILES`]), leaving anything else.
    /// Entries already gone are fine (another MPI rank may have removed them).
    pub fn remove(&self) -> Result<()> {
        for f in &self.files {
            let p = self.dir.join(f);
            let r = if p.is_dir() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
            match r {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(e).with_context(|| format!("cannot remove {} (replacing the old run)", p.display()))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// Whether `dir` holds a run (any of [`RUN_FILES`]), and what of it.
pub fn inspect(dir: &Path) -> Option<ExistingRun> {
    let files: Vec<String> = RUN_FILES.iter().filter(|f| dir.join(f).exists()).map(|f| f.to_string()).collect();
    if files.is_empty() {
        return None;
    }
    let checkpoints = checkpoint::list(&checkpoint::checkpoints_dir(dir));
    let progress = checkpoint::read_state(dir).ok().map(|(_, st)| {
        let total = RunConfig::from_toml(&st.run_config).map_or(st.step, |c| c.train.steps);
        (st.step, total)
    });
    let metrics = fs::read_to_string(dir.join("metrics.jsonl")).ok().map(|text| {
        let last = text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["step"].as_u64())
            .next_back();
        (text.lines().count(), last)
    });
    Some(ExistingRun { dir: dir.to_path_buf(), files, checkpoints, progress, metrics })
}

/// Before a fresh run writes into `dir`: refuse if it already holds a run,
/// unless `force`. The error says what is there and names the ways on:
/// `--resume` (with a command that works as pasted, when there is a
/// checkpoint), `--force`, or another `--out`. With `force`, returns the
/// run that [`claim_fresh`] will replace. Reads only; call it before any
/// work so a refusal costs nothing.
pub fn check_fresh(dir: &Path, force: bool) -> Result<Option<ExistingRun>> {
    let Some(run) = inspect(dir) else { return Ok(None) };
    if force {
        return Ok(Some(run));
    }
    let d = shell_quote(&dir.display().to_string());
    let resume = match run.progress {
        Some((step, total)) if step < total => format!("continue it with `lowcomm train --resume {d}`, "),
        Some((_, total)) => {
            format!("train it further with `lowcomm train --resume {d} --steps {}`, ", 2 * total.max(1))
        }
        None => "it has no checkpoint to --resume from; ".to_string(),
    };
    bail!(
        "{} already holds a run ({}): {resume}start it over with --force (replaces its {}), or choose another --out",
        dir.display(),
        run.describe(),
        run.files.join(", ")
    )
}

/// [`check_fresh`], then with `force` remove the old run's files, saying on
/// stderr what was replaced (always: this deletes a user's results). Call it
/// once the new run's config has been validated and its data opened, just
/// before the first write, so a run that fails to start replaces nothing.
pub fn claim_fresh(dir: &Path, force: bool) -> Result<()> {
    if let Some(run) = check_fresh(dir, force)? {
        eprintln!(
            "--force: replacing the run in {} ({}): removing {}",
            dir.display(),
            run.describe(),
            run.files.join(", ")
        );
        run.remove()?;
    }
    Ok(())
}

/// A run to continue, as `--resume` names it.
#[derive(Clone, Debug)]
pub struct Resume {
    /// The run directory training continues in: metrics are appended to
    /// its `metrics.jsonl` and checkpoints added to its `checkpoints/`.
    pub run_dir: PathBuf,
    /// The checkpoint it continues from.
    pub checkpoint: PathBuf,
    /// That checkpoint's step.
    pub step: u64,
    /// The model it holds.
    pub model: GptConfig,
    /// The run's configuration as saved in that checkpoint, with
    /// `train.out_dir = run_dir` and its data directory resolved (see the
    /// module docs); apply flags on top, then call [`Resume::bind`].
    pub config: RunConfig,
}

/// Resolve `--resume ARG` (a run directory, its `checkpoints/`, or one
/// `checkpoints/step-N`) to the run it continues. `out` is `--out` if given:
/// it must name the same run (to branch a run, copy its directory and
/// resume the copy), except for a checkpoint that is not inside a run
/// directory, which needs it to say where the run goes. Reads only the
/// checkpoint's `state.json` (the tensors are verified when they are loaded).
pub fn resolve_resume(arg: &Path, out: Option<&Path>) -> Result<Resume> {
    let (ckpt, state) = checkpoint::read_state(arg)?;
    let run_dir = match (run_dir_of(&ckpt), out) {
        (Some(run), None) => run,
        (Some(run), Some(o)) if same_dir(&run, o) => run,
        (Some(run), Some(o)) => bail!(
            "--resume continues in the run's own directory, {}; --out {} names another. Drop --out (or, to branch the run, copy its directory to {} and resume the copy)",
            run.display(),
            o.display(),
            o.display()
        ),
        (None, Some(o)) => {
            check_fresh(o, false)?;
            o.to_path_buf()
        }
        (None, None) => bail!(
            "checkpoint {} is not inside a run directory (RUN/checkpoints/step-N): pass --out DIR to say where the resumed run goes",
            ckpt.display()
        ),
    };
    let mut config = parse_saved(&ckpt, &state)?;
    resolve_saved_paths(&mut config, Some(&run_dir));
    config.train.out_dir = run_dir.clone();
    Ok(Resume { run_dir, checkpoint: ckpt, step: state.step, model: state.model.clone(), config })
}

/// The run configuration saved in a checkpoint (`ckpt`: a run directory or
/// a checkpoint directory, as `--ckpt` takes), with the relative paths of
/// configs saved by older versions resolved (see the module docs). For
/// `eval` and anything else that reads a run without continuing it.
pub fn saved_config(ckpt: &Path, state: &checkpoint::TrainState) -> Result<RunConfig> {
    let dir = checkpoint::resolve(ckpt)?;
    let mut config = parse_saved(&dir, state)?;
    resolve_saved_paths(&mut config, run_dir_of(&dir).as_deref());
    Ok(config)
}

/// RUN for a checkpoint directory RUN/checkpoints/step-N; None for a
/// checkpoint directory elsewhere.
fn run_dir_of(ckpt_dir: &Path) -> Option<PathBuf> {
    ckpt_dir.parent().filter(|p| p.file_name().is_some_and(|n| n == "checkpoints")).and_then(Path::parent).map(|p| {
        if p.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            p.to_path_buf()
        }
    })
}

fn parse_saved(ckpt_dir: &Path, state: &checkpoint::TrainState) -> Result<RunConfig> {
    RunConfig::from_toml(&state.run_config)
        .with_context(|| format!("the run configuration saved in {} does not parse", ckpt_dir.display()))
}

/// Make the saved config's relative paths (from older versions) absolute,
/// as they were meant when the run was started (see [`resolve_legacy`]).
fn resolve_saved_paths(config: &mut RunConfig, run_dir: Option<&Path>) {
    let recorded_out = config.train.out_dir.clone();
    let resolve = |p: &Path| match run_dir {
        Some(run) => resolve_legacy(p, run, &recorded_out),
        None => absolute(p),
    };
    if let Ok(model) = config.model.resolve() {
        let data = config.data_dir(&model);
        if data.is_relative() {
            config.data.dir = Some(resolve(&data));
        }
    }
    if let Some(c) = config.parallel.cluster.clone().filter(|c| c.is_relative()) {
        config.parallel.cluster = Some(resolve(&c));
    }
}

impl Resume {
    /// Point `cfg` (the saved config or the user's `--config`, with flags
    /// applied) at this run: `out_dir` is the run directory, paths are
    /// recorded ([`record_paths`]), and a corpus that is no longer where the
    /// run recorded it is an error naming it and `--data`. `data_flag`: the
    /// user passed `--data` (then a missing corpus is theirs to fix and the
    /// usual "no prepared corpus" error reports it).
    pub fn bind(&self, cfg: &mut RunConfig, data_flag: bool) -> Result<()> {
        cfg.train.out_dir = self.run_dir.clone();
        record_paths(cfg);
        // The model first: another model also means another default corpus,
        // and "prepare a corpus" would be the wrong advice.
        if let Ok(model) = cfg.model.resolve() {
            if model != self.model {
                bail!(
                    "checkpoint {} was trained with another model: {}; resume with the same model settings (drop --preset and the shape flags --vocab-size, --n-layer, --n-embd, --n-head, --ctx, or the [model] changes of --config)",
                    self.checkpoint.display(),
                    model_change(&self.model, &model)
                );
            }
        }
        if data_flag {
            return Ok(());
        }
        if let Ok(model) = cfg.model.resolve() {
            let data = cfg.data_dir(&model);
            if !data.join(crate::data::tokens::META_FILE).is_file() {
                bail!(
                    "the corpus run {} was trained on is gone: no prepared corpus at {} (recorded in {}). If it moved, point the run at it (or at another copy) with `--data DIR` added to this command; its tokenizer must be the checkpoint's",
                    self.run_dir.display(),
                    data.display(),
                    self.checkpoint.join("state.json").display()
                );
            }
        }
        Ok(())
    }
}

/// The fields in which model `now` differs from the `run`'s, e.g.
/// "n_layer 2 (run) vs 6 (now), n_embd 128 (run) vs 256 (now)".
pub fn model_change(run: &GptConfig, now: &GptConfig) -> String {
    let fields = [
        ("vocab_size", run.vocab_size.to_string(), now.vocab_size.to_string()),
        ("n_embd", run.n_embd.to_string(), now.n_embd.to_string()),
        ("n_layer", run.n_layer.to_string(), now.n_layer.to_string()),
        ("n_head", run.n_head.to_string(), now.n_head.to_string()),
        ("ctx", run.ctx.to_string(), now.ctx.to_string()),
        ("dropout", run.dropout.to_string(), now.dropout.to_string()),
    ];
    let changed: Vec<String> =
        fields.iter().filter(|(_, a, b)| a != b).map(|(k, a, b)| format!("{k} {a} (run) vs {b} (now)")).collect();
    changed.join(", ")
}

/// Record the paths a run depends on as absolute paths (the data directory,
/// set explicitly even when it was the default; the cluster profile), so
/// the saved config works from any directory and after the run directory
/// moves. Paths are canonical when they exist (symlinks resolved), else made
/// absolute against the current directory.
pub fn record_paths(cfg: &mut RunConfig) {
    if let Ok(model) = cfg.model.resolve() {
        cfg.data.dir = Some(absolute(&cfg.data_dir(&model)));
    }
    if let Some(c) = &cfg.parallel.cluster {
        cfg.parallel.cluster = Some(absolute(c));
    }
}

/// `p` as an absolute path: canonical if it exists, else joined to the
/// current directory (with `.` components dropped).
pub fn absolute(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    abs.components().filter(|c| !matches!(c, std::path::Component::CurDir)).collect()
}

/// Whether two paths name the same directory (or would, once created).
pub fn same_dir(a: &Path, b: &Path) -> bool {
    absolute(a) == absolute(b)
}

/// A relative path saved by an older lowcomm: relative to the directory
/// that run was started from. Try the current directory, then that
/// directory as the run's location tells it (`/x/runs/nano` saved as
/// `runs/nano` was started in `/x`); the first that exists wins, else the
/// current directory's (and the error names it).
fn resolve_legacy(p: &Path, run_dir: &Path, recorded_out: &Path) -> PathBuf {
    let here = absolute(p);
    if here.exists() {
        return here;
    }
    let run_abs = absolute(run_dir);
    let n = recorded_out.components().filter(|c| !matches!(c, std::path::Component::CurDir)).count();
    if recorded_out.is_relative() && n > 0 && run_abs.ends_with(recorded_out) {
        let launch: PathBuf = run_abs.components().take(run_abs.components().count() - n).collect();
        if launch.join(p).exists() {
            return absolute(&launch.join(p));
        }
    }
    here
}

/// Quote `s` for a POSIX shell if it needs it, so a command in an error
/// message works when pasted.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
#[path = "rundir_tests.rs"]
mod tests;
