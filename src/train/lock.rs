//! One run at a time in a run directory: an exclusive lock on `RUN/.lock`,
//! held for the run's life.
//!
//! - The lock is the operating system's (`flock` through std's
//!   `File::try_lock`): it is released on any exit, a crash or `kill -9`
//!   included, so a lock is never left held by a process that is gone.
//! - The file names its holder (process id and command line), so a run
//!   refused because another one trains there is told which: "RUN is in
//!   use by process 1234 (lowcomm train ...)". A holder that ends cleanly
//!   empties the file; one that was killed leaves its name in it, and the
//!   next run to take the lock says so (a stale lock, detected and named).
//! - The file is never deleted: deleting a lock file lets two processes
//!   hold locks on two different files of the same name.
//! - Taken once every check of the run has passed, just before its first
//!   write (so a refused run creates nothing); [`check_free`] refuses
//!   earlier, reading only, when the lock is already held.
//! - Under MPI, rank 0 holds it (it owns the run's files).
//!
//! A filesystem without locks (some network filesystems) makes taking the
//! lock fail with that error, naming the file.

use anyhow::{bail, Context, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The lock file in a run directory.
pub const LOCK_FILE: &str = ".lock";

/// How long [`RunLock::acquire`] retries a lock held by someone else
/// before refusing: [`check_free`] holds a shared lock for an instant, and
/// a run must not be refused because another process looked.
const RETRY: Duration = Duration::from_millis(500);

/// The lock of one run directory, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    file: File,
    path: PathBuf,
}

impl RunLock {
    /// Takes the lock of run directory `dir` (creating the directory and
    /// the lock file), or refuses naming the process that holds it.
    pub fn acquire(dir: &Path) -> Result<RunLock> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create the run directory {}", dir.display()))?;
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("cannot open the run's lock file {}", path.display()))?;
        let start = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if start.elapsed() < RETRY => std::thread::sleep(RETRY / 20),
                Err(TryLockError::WouldBlock) => bail!("{}", in_use(dir, &path)),
                Err(TryLockError::Error(e)) => {
                    return Err(e)
                        .with_context(|| format!("cannot lock {} (a filesystem without file locks?)", path.display()))
                }
            }
        }
        let mut before = String::new();
        let _ = file.read_to_string(&mut before);
        if let Some(holder) = Holder::parse(&before) {
            eprintln!(
                "note: {} was locked by process {} ({}), which ended without releasing it (killed or crashed); taking it over. Its run's last checkpoint is intact; anything after it was lost",
                dir.display(),
                holder.pid,
                holder.command
            );
        }
        let me = Holder::me().to_string();
        file.set_len(0)
            .and_then(|_| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(me.as_bytes()))
            .and_then(|_| file.flush())
            .with_context(|| format!("cannot write the run's lock file {}", path.display()))?;
        Ok(RunLock { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for RunLock {
    /// A clean end empties the file (nothing stale to report), then unlocks.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// Refuses, naming the holder, when another process holds `dir`'s lock.
/// Reads only: creates nothing (the lock is taken later, by
/// [`RunLock::acquire`], once every check has passed).
pub fn check_free(dir: &Path) -> Result<()> {
    let path = dir.join(LOCK_FILE);
    let Ok(file) = File::open(&path) else { return Ok(()) };
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            Ok(())
        }
        Err(TryLockError::WouldBlock) => bail!("{}", in_use(dir, &path)),
        // A filesystem without locks: acquire() will say so.
        Err(TryLockError::Error(_)) => Ok(()),
    }
}

/// The refusal: who holds `dir`, and what to do.
fn in_use(dir: &Path, path: &Path) -> String {
    // The holder writes its name just after locking: give it a moment.
    let mut holder = None;
    for _ in 0..20 {
        holder = std::fs::read_to_string(path).ok().and_then(|t| Holder::parse(&t));
        if holder.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let who = match &holder {
        Some(h) => format!("process {} ({})", h.pid, h.command),
        None => "another process (it has not written its name yet)".into(),
    };
    let stop = match &holder {
        Some(h) => format!("stop it with `kill -INT {}` (it saves a checkpoint at its next round), ", h.pid),
        None => String::new(),
    };
    format!(
        "{} is in use by {who}, which is training there; wait for it to finish, {stop}or choose another --out",
        dir.display()
    )
}

/// What the lock file says about its holder.
#[derive(Clone, Debug, PartialEq)]
struct Holder {
    pid: u32,
    command: String,
}

impl Holder {
    /// This process.
    fn me() -> Holder {
        let command = std::env::args().map(|a| crate::train::rundir::shell_quote(&a)).collect::<Vec<_>>().join(" ");
        let command = match command.char_indices().nth(200) {
            Some((i, _)) => format!("{} ...", &command[..i]),
            None => command,
        };
        Holder { pid: std::process::id(), command }
    }

    /// `pid N` on the first line, the command on the second; `None` for an
    /// empty (released) file.
    fn parse(text: &str) -> Option<Holder> {
        let mut lines = text.lines();
        let pid = lines.next()?.strip_prefix("pid ")?.trim().parse().ok()?;
        let command = lines.next().unwrap_or("").trim().to_string();
        Some(Holder { pid, command })
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "pid {}", self.pid)?;
        writeln!(f, "{}", self.command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_and_freed_on_drop() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        check_free(&dir).unwrap();
        assert!(!dir.exists(), "check_free creates nothing");
        let lock = RunLock::acquire(&dir).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts like another process.
        let e = RunLock::acquire(&dir).unwrap_err().to_string();
        let pid = std::process::id();
        assert!(e.contains(&format!("in use by process {pid} (")) && e.contains(&format!("kill -INT {pid}")), "{e}");
        assert!(check_free(&dir).unwrap_err().to_string().contains(&format!("process {pid}")));
        drop(lock);
        assert_eq!(std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(), "", "a clean release empties the file");
        check_free(&dir).unwrap();
        let again = RunLock::acquire(&dir).unwrap();
        assert!(std::fs::read_to_string(again.path()).unwrap().starts_with(&format!("pid {pid}\n")));
    }

    #[test]
    fn the_holder_line_round_trips_and_an_empty_file_holds_nobody() {
        let h = Holder { pid: 42, command: "lowcomm train --out 'my run'".into() };
        assert_eq!(Holder::parse(&h.to_string()), Some(h));
        assert_eq!(Holder::parse(""), None);
        assert_eq!(Holder::parse("garbage"), None);
    }
}
