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
    write_atomic(path, Some(bytes.len() as u64), |f| f.write_all(bytes).map_err(Into::into))
}

/// Like [`atomic_write`], but lets the caller stream into the file.
pub fn atomic_write_with(path: &Path, fill: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
    write_atomic(path, None, fill)
}

/// The atomic write itself; `size` (when known) goes into the error of a
/// write that finds its disk full.
fn write_atomic(path: &Path, size: Option<u64>, fill: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
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
    result.map_err(|e| disk_full(e, path, size))
}

/// Turns a write error caused by a full disk into one that names the file,
/// the space it needed and the space left (the bare "No space left on device
/// (os error 28)" names neither); other errors pass through unchanged.
pub fn disk_full(e: anyhow::Error, path: &Path, size: Option<u64>) -> anyhow::Error {
    let full = e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.raw_os_error() == Some(28)));
    if !full {
        return e;
    }
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let need = size.map_or(String::new(), |n| format!(" (the file is {})", human_bytes(n)));
    let free = free_bytes(dir).map_or(String::new(), |n| format!("; {} is free there now", human_bytes(n)));
    anyhow::anyhow!(
        "the disk is full: cannot write {}{need}{free}. Free some space on that disk (older runs, \
         checkpoints) or write the run elsewhere (--out DIR)",
        path.display()
    )
}

/// Bytes available to this user on the filesystem holding `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c` is a NUL-terminated path and `st` is written by statvfs
    // before it is read (only when it returns 0).
    let st = unsafe {
        if libc::statvfs(c.as_ptr(), st.as_mut_ptr()) != 0 {
            return None;
        }
        st.assume_init()
    };
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// `1.5 MB`-style sizes for messages.
pub fn human_bytes(n: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < units.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
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

    #[test]
    fn a_full_disk_is_reported_with_the_file_its_size_and_the_space_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("part-000.safetensors");
        let full = anyhow::Error::from(std::io::Error::from_raw_os_error(28)).context("while saving");
        let msg = format!("{:#}", disk_full(full, &path, Some(8_000_000)));
        assert!(msg.contains("the disk is full") && msg.contains(&path.display().to_string()), "{msg}");
        assert!(
            msg.contains("the file is 8.0 MB") && msg.contains("is free there now") && msg.contains("--out"),
            "{msg}"
        );
        let other = anyhow::anyhow!("permission denied");
        assert_eq!(format!("{}", disk_full(other, &path, None)), "permission denied");
    }

    #[test]
    fn sizes_read_in_the_unit_that_fits() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1_500), "1.5 kB");
        assert_eq!(human_bytes(8_000_000), "8.0 MB");
        assert_eq!(human_bytes(2_500_000_000), "2.5 GB");
    }
}
