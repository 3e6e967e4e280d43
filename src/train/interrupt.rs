//! Ctrl-C without losing the run: the first SIGINT (or SIGTERM) asks the
//! run to stop at its next round boundary (a single-worker run: after the
//! step in progress), write a checkpoint there and exit with status 130,
//! printing the command that continues it; a second one exits at once
//! (status 130, or 143 for SIGTERM), losing only the rounds since the last
//! checkpoint, which is never half-written (checkpoints are written into a
//! temporary directory renamed into place).
//!
//! `lowcomm train` installs the handler ([`Handler::install`]); the flag
//! it sets reaches every participant through `strategy::StopRequest`,
//! which makes them agree on the boundary. Under MPI the launcher forwards
//! the signal to every rank, and the ranks vote on it at each boundary
//! (one byte, strategy/stop.rs), so they all stop at the same one; only
//! rank 0 says so. `compare` and library users install nothing.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::SigId;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The handlers of SIGINT and SIGTERM, while this lives.
pub struct Handler {
    flag: Arc<AtomicBool>,
    ids: Vec<SigId>,
    done: Arc<AtomicBool>,
}

impl Handler {
    /// Installs the handlers: a first signal sets [`Handler::flag`] (and a
    /// line on stderr says what happens next), a second exits at once.
    pub fn install() -> Result<Handler> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut ids = Vec::new();
        for (signal, status) in [(SIGINT, 130), (SIGTERM, 143)] {
            // Registered first, so it sees the flag as the previous signal left it.
            ids.push(signal_hook::flag::register_conditional_shutdown(signal, status, flag.clone())?);
            ids.push(signal_hook::flag::register(signal, flag.clone()).context("cannot install the signal handler")?);
        }
        let done = Arc::new(AtomicBool::new(false));
        let (f, d) = (flag.clone(), done.clone());
        // A handler may not print; this thread says it as soon as it sees the flag.
        std::thread::Builder::new().name("interrupt".into()).spawn(move || {
            while !d.load(Ordering::Relaxed) {
                if f.load(Ordering::SeqCst) {
                    if !first_rank() {
                        return;
                    }
                    eprintln!("\ninterrupt: stopping at the end of the current round to write a checkpoint (Ctrl-C again exits at once, losing the rounds since the last checkpoint)");
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?;
        Ok(Handler { flag, ids, done })
    }

    /// Set once a stop is requested.
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.flag.clone()
    }
}

impl Drop for Handler {
    /// Back to the default handling (a signal ends the process).
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Whether this process speaks for the run: not an MPI rank other than 0
/// (the launchers' variables: MPICH's hydra, Open MPI), read before MPI starts.
pub fn first_rank() -> bool {
    ["PMI_RANK", "OMPI_COMM_WORLD_RANK"].iter().all(|v| std::env::var(v).map_or(true, |r| r == "0"))
}

/// Whether a stop was requested through `flag`.
pub fn requested(flag: &Option<Arc<AtomicBool>>) -> bool {
    flag.as_ref().is_some_and(|f| f.load(Ordering::SeqCst))
}

/// A run that stopped on request, with its checkpoint: the error `train`
/// ends with (exit status 130), saying how to continue.
#[derive(Clone, Debug)]
pub struct Interrupted {
    /// The run directory.
    pub run_dir: PathBuf,
    /// The checkpoint written where it stopped (`None`: it stopped before
    /// its first step, and wrote nothing).
    pub checkpoint: Option<PathBuf>,
    /// Steps (rounds) done.
    pub step: u64,
    /// Of how many.
    pub steps: u64,
    /// What the continuing command starts with (`mpirun -np 4 `), if not `lowcomm`.
    pub launcher: Option<String>,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dir = crate::train::rundir::shell_quote(&self.run_dir.display().to_string());
        match &self.checkpoint {
            Some(c) => write!(
                f,
                "interrupted: stopped at step {} of {} with a checkpoint ({}); continue the run with `{}lowcomm train --resume {dir}`",
                self.step,
                self.steps,
                c.display(),
                self.launcher.as_deref().unwrap_or("")
            ),
            None => write!(f, "interrupted before the run started: nothing was written to {}", self.run_dir.display()),
        }
    }
}

impl std::error::Error for Interrupted {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_gives_the_command_that_continues_the_run() {
        let i = Interrupted {
            run_dir: "my runs/a".into(),
            checkpoint: Some("my runs/a/checkpoints/step-000040".into()),
            step: 40,
            steps: 100,
            launcher: None,
        };
        assert_eq!(
            i.to_string(),
            "interrupted: stopped at step 40 of 100 with a checkpoint (my runs/a/checkpoints/step-000040); continue the run with `lowcomm train --resume 'my runs/a'`"
        );
        let mpi = Interrupted { launcher: Some("mpirun -np 4 ".into()), ..i };
        assert!(mpi.to_string().ends_with("continue the run with `mpirun -np 4 lowcomm train --resume 'my runs/a'`"));
    }
}
