//! Crash-safe file output.
//!
//! Every file lowcomm writes that a user may depend on (token files,
//! tokenizer, checkpoints, metrics summaries) goes through [`atomic_write`]:
//! the bytes land in a temporary file in the same directory, are fsynced,
//! and only then renamed over the target. A process killed mid-write leaves
//! either the old file or the new one, never a torn one.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

/// Write `bytes` to `path` atomically (temp file + fsync + rename + fsync dir).
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    atomic_write_with(path, |f| f.write_all(bytes).map_err(Into::into))
}

/// Like [`atomic_write`], but lets the caller stream into the file.
pub fn atomic_write_with(path: &Path, fill: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    fs::create_dir_all(dir).with_context(|| format!("cannot create directory {}", dir.display()))?;
    let name = path.file_name().with_context(|| format!("{} is not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
        fill(&mut f)?;
        f.sync_all().with_context(|| format!("cannot fsync {}", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))?;
        sync_dir(dir);
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Names of the entries of `dir`, sorted; empty if it does not exist. An
/// error if it is not a directory.
pub fn dir_entries(dir: &Path) -> Result<Vec<String>> {
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut names = fs::read_dir(dir)
        .with_context(|| format!("{} is not a readable directory", dir.display()))?
        .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    names.sort();
    Ok(names)
}

/// Create the directory `dir` in one step: `fill` writes into a fresh
/// temporary sibling, which is fsynced and renamed to `dir` only once
/// complete. If `fill` fails, the temporary directory is removed and `dir`
/// is untouched. An existing `dir` (the caller decides whether replacing it
/// is allowed) is renamed aside first and removed after the new one is in
/// place; if that rename fails, it is put back.
pub fn write_dir_atomic(dir: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = dir.file_name().with_context(|| format!("{} is not a directory path", dir.display()))?;
    fs::create_dir_all(parent).with_context(|| format!("cannot create directory {}", parent.display()))?;
    let sibling = |what: &str| parent.join(format!(".{}.{what}-{}", name.to_string_lossy(), std::process::id()));
    let (tmp, old) = (sibling("tmp"), sibling("old"));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir(&tmp).with_context(|| format!("cannot create {}", tmp.display()))?;
    if let Err(e) = fill(&tmp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    sync_dir(&tmp);
    let had_old = dir.exists();
    if had_old {
        if let Err(e) = fs::rename(dir, &old) {
            let _ = fs::remove_dir_all(&tmp);
            return Err(e).with_context(|| format!("cannot move {} aside", dir.display()));
        }
    }
    if let Err(e) = fs::rename(&tmp, dir) {
        if had_old {
            let _ = fs::rename(&old, dir);
        }
        let _ = fs::remove_dir_all(&tmp);
        return Err(e).with_context(|| format!("cannot rename {} to {}", tmp.display(), dir.display()));
    }
    sync_dir(parent);
    if had_old {
        fs::remove_dir_all(&old).with_context(|| format!("cannot remove the replaced {}", old.display()))?;
    }
    Ok(())
}

/// fsync a directory so a rename inside it is durable. Best effort: some
/// filesystems refuse to open directories for syncing.
pub fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Lower-case hex SHA-256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex SHA-256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex(&h.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        atomic_write(&p, b"one").unwrap();
        atomic_write(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "temp file left behind: {names:?}");
    }

    #[test]
    fn failed_fill_keeps_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        atomic_write(&p, b"old").unwrap();
        let r = atomic_write_with(&p, |f| {
            f.write_all(b"partial")?;
            anyhow::bail!("simulated crash")
        });
        assert!(r.is_err());
        assert_eq!(fs::read(&p).unwrap(), b"old");
    }

    #[test]
    fn write_dir_atomic_leaves_nothing_when_fill_fails_and_replaces_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let r = write_dir_atomic(&dir, |d| {
            fs::write(d.join("a"), "half")?;
            anyhow::bail!("simulated failure")
        });
        assert!(r.is_err() && !dir.exists());
        write_dir_atomic(&dir, |d| Ok(fs::write(d.join("old"), "1")?)).unwrap();
        write_dir_atomic(&dir, |d| Ok(fs::write(d.join("new"), "2")?)).unwrap();
        assert_eq!(dir_entries(&dir).unwrap(), ["new"]);
        // Only `out` is left in the parent: no temporary or replaced directory.
        assert_eq!(dir_entries(tmp.path()).unwrap(), ["out"]);
    }

    #[test]
    fn sha256_of_abc() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
