//! A checkpoint being written: files go into a temp directory beside the
//! final one, which is renamed into place only when complete.

use super::write_f32_tensors;
use super::{checkpoints_dir, prune, TrainState, LATEST_FILE, MODEL_FILE, OPTIM_FILE, STATE_FILE, TOKENIZER_FILE};
use crate::model::GptConfig;
use crate::util::{atomic_write, fsio::sync_dir, sha256_file};
use anyhow::{Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// A checkpoint being written: a temp directory beside the final one.
/// Files go in with [`Staging::path`]; [`Staging::commit`] hashes them,
/// writes `state.json`, renames the directory into place and moves `latest`.
///
/// A staging directory this process owns is removed if it is dropped before
/// [`Staging::commit`] (a failed write, a full disk, a diverged run), so a
/// failure leaves no `.tmp` directory behind.
pub struct Staging {
    root: PathBuf,
    name: String,
    tmp: PathBuf,
    /// Remove `tmp` on drop (set while this process owns it and has not committed).
    remove_on_drop: bool,
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.remove_on_drop {
            let _ = fs::remove_dir_all(&self.tmp);
        }
    }
}

impl Staging {
    /// Starts the checkpoint of `step` under `run_dir`. A step saved again
    /// (e.g. a fresh run into an old run directory) gets a new name instead
    /// of replacing the old directory, so there is no moment at which
    /// `latest` points at nothing.
    pub fn begin(run_dir: &Path, step: u64) -> Result<Staging> {
        let root = checkpoints_dir(run_dir);
        fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
        let name = (0..)
            .map(|k| if k == 0 { format!("step-{step:06}") } else { format!("step-{step:06}-{k}") })
            .find(|n| !root.join(n).exists())
            .expect("some suffix is free");
        let tmp = root.join(format!("{name}.tmp-{}", std::process::id()));
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok(Staging { root, name, tmp, remove_on_drop: true })
    }

    /// Starts (or joins) the checkpoint of `step` that several processes
    /// write together: every one calls this with the same `tag` and gets the
    /// same temp directory (`step-N.tmp-TAG`); nothing is removed, so one
    /// process cannot delete another's files. The final name is chosen as
    /// in [`Staging::begin`]; all processes see the same directory listing,
    /// since only the committing process ever creates a final directory.
    pub fn begin_shared(run_dir: &Path, step: u64, tag: &str) -> Result<Staging> {
        let root = checkpoints_dir(run_dir);
        fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
        let name = (0..)
            .map(|k| if k == 0 { format!("step-{step:06}") } else { format!("step-{step:06}-{k}") })
            .find(|n| !root.join(n).exists())
            .expect("some suffix is free");
        let tmp = root.join(format!("{name}.tmp-{tag}"));
        fs::create_dir_all(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        Ok(Staging { root, name, tmp, remove_on_drop: false })
    }

    /// Takes ownership of a shared temp directory once every other process
    /// is done writing into it: it is removed if this one fails to commit.
    pub fn own(&mut self) {
        self.remove_on_drop = true;
    }

    /// The temp directory files go into.
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// Writes the model, optimizer and tokenizer files.
    pub fn write_core(
        &self,
        model: &GptConfig,
        params: &[f32],
        optimizer: &[(String, &[f32])],
        tokenizer_json: &str,
    ) -> Result<()> {
        let layout = crate::model::ParamLayout::new(model);
        let named: Vec<(&str, Vec<usize>, &[f32])> =
            layout.tensors.iter().map(|t| (t.name.as_str(), t.shape.clone(), &params[t.range.clone()])).collect();
        write_f32_tensors(&self.tmp.join(MODEL_FILE), &named)?;
        let opt: Vec<(&str, Vec<usize>, &[f32])> =
            optimizer.iter().map(|(n, d)| (n.as_str(), vec![d.len()], *d)).collect();
        write_f32_tensors(&self.tmp.join(OPTIM_FILE), &opt)?;
        atomic_write(&self.tmp.join(TOKENIZER_FILE), tokenizer_json.as_bytes())
    }

    /// Hashes the core files and `extra` files, writes `state.json`, renames
    /// the directory into place, points `latest` at it and prunes all but
    /// the newest `keep`. Returns the checkpoint's directory.
    pub fn commit(mut self, mut state: TrainState, extra: &[String], keep: usize) -> Result<PathBuf> {
        state.files.clear();
        for f in [MODEL_FILE, OPTIM_FILE, TOKENIZER_FILE].into_iter().chain(extra.iter().map(String::as_str)) {
            state.files.insert(f.to_string(), sha256_file(&self.tmp.join(f))?);
        }
        atomic_write(&self.tmp.join(STATE_FILE), serde_json::to_string_pretty(&state)?.as_bytes())?;
        sync_dir(&self.tmp);
        let final_dir = self.root.join(&self.name);
        fs::rename(&self.tmp, &final_dir)
            .with_context(|| format!("cannot rename {} to {}", self.tmp.display(), final_dir.display()))?;
        self.remove_on_drop = false;
        sync_dir(&self.root);
        atomic_write(&self.root.join(LATEST_FILE), self.name.as_bytes())?;
        prune(&self.root, keep, &self.name)?;
        Ok(final_dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staging_dropped_before_commit_leaves_no_temp_directory() {
        let run = tempfile::tempdir().unwrap();
        let staging = Staging::begin(run.path(), 5).unwrap();
        let tmp = staging.path().to_path_buf();
        std::fs::write(tmp.join("part-000.safetensors"), b"half a part").unwrap();
        drop(staging); // as when writing a part fails (a full disk) or the run diverged
        assert!(!tmp.exists(), "{} is left behind", tmp.display());
        assert!(crate::util::fsio::dir_entries(&checkpoints_dir(run.path())).unwrap().is_empty());
    }

    #[test]
    fn a_shared_staging_is_removed_only_by_the_process_that_owns_it() {
        let run = tempfile::tempdir().unwrap();
        let other = Staging::begin_shared(run.path(), 3, "mpi-1").unwrap();
        let tmp = other.path().to_path_buf();
        drop(other); // a rank that wrote its part and returned: rank 0 still needs the directory
        assert!(tmp.exists());
        let mut root = Staging::begin_shared(run.path(), 3, "mpi-1").unwrap();
        root.own();
        drop(root); // rank 0 failed to commit
        assert!(!tmp.exists());
    }
}
