//! Ending the whole job when a peer rank dies or hangs, instead of leaving
//! the others waiting for it for ever.
//!
//! Two kinds of MPI call can wait on a peer. Collectives and messages are
//! started non-blocking and completed by a polling loop that checks
//! [`super::Poll::timeout`] between tests. Making a communicator
//! (`MPI_Comm_dup`, `MPI_Comm_split_type`, `MPI_Comm_create_group`) has no
//! non-blocking form in rsmpi and agrees a context id with every member:
//! a stopped peer holds it for ever. [`bounded`] puts a deadline on those.

use mpi::topology::{Communicator as _, SimpleCommunicator};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// The line a rank prints when `what` has waited `timeout` on its peers.
pub(super) fn timed_out(what: &str, timeout: Duration) -> String {
    format!(
        "{what} did not complete in {:.0} s: a peer rank has probably died or hangs (LOWCOMM_MPI_TIMEOUT_S raises the limit if a step legitimately takes longer)",
        timeout.as_secs_f64()
    )
}

/// Runs `call`, a blocking MPI call that no polling loop can bound, and
/// aborts the job if it has not returned after `timeout`.
///
/// Seen in the MPI suite (tests/mpi.rs, a rank that hangs): a group's
/// communicator made on the group's first collective, after the peer had
/// stopped, left rank 0 inside `MPI_Comm_dup` until the launcher's own
/// 5-minute limit. A watchdog thread waits for `call` to return; the
/// channel closing (when `call` returns) releases it at once.
pub fn bounded<T>(rank: usize, timeout: Duration, what: &str, call: impl FnOnce() -> T) -> T {
    let (returned, watched) = mpsc::channel::<()>();
    let why = timed_out(what, timeout);
    let watchdog = std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = watched.recv_timeout(timeout) {
            abort_job(&SimpleCommunicator::world(), rank, &why);
        }
    });
    let out = call();
    drop(returned);
    // Returns at once: the channel is closed.
    let _ = watchdog.join();
    out
}

/// Prints `why`, then `MPI_Abort`s every rank of `comm`'s job. The pause
/// lets the launcher forward this rank's stderr first: hydra tears the job
/// down at once, and the message was lost in about one run of three when
/// several jobs shared this 2-core machine.
///
/// `MPI_Abort` may fail to end the process: once in 20 runs of the MPI
/// suite under load (docs/decisions.md, "The MPI tests 20 times under
/// load") the rank that should have aborted stayed alive for minutes with
/// its communication thread inside MPICH (ch4:ucx), most likely in the
/// library's exit path. A watchdog armed first ends this process with `_exit`
/// (no exit handlers, no library destructors) after [`ABORT_GRACE`]; the
/// launcher then sees a rank gone and ends the others.
pub fn abort_job(comm: &SimpleCommunicator, rank: usize, why: &str) -> ! {
    eprintln!("lowcomm (mpi rank {rank}): {why}; aborting all ranks");
    std::thread::spawn(move || {
        std::thread::sleep(ABORT_GRACE);
        eprintln!("lowcomm (mpi rank {rank}): MPI_Abort did not end this rank in {} s; exiting", ABORT_GRACE.as_secs());
        // SAFETY: _exit ends the process at once; nothing runs after it.
        unsafe { libc::_exit(1) }
    });
    std::thread::sleep(Duration::from_millis(300));
    if std::env::var_os("LOWCOMM_FAULT_ABORT_HANGS").is_some() {
        // Tests: stand in for an MPI_Abort that never returns nor ends the process.
        loop {
            std::thread::park();
        }
    }
    comm.abort(1)
}

/// How long [`abort_job`] lets `MPI_Abort` take before the watchdog ends
/// the process itself.
pub const ABORT_GRACE: Duration = Duration::from_secs(10);

/// Tests (`LOWCOMM_FAULT=hang:RANK:group`): this rank stops just before it
/// makes its first group's communicator (see [`before_making_a_group`]).
static HANG_BEFORE_FIRST_GROUP: AtomicBool = AtomicBool::new(false);

/// Arms the `group` fault (train/parallel/mpi.rs `inject_fault`).
pub fn hang_before_first_group() {
    HANG_BEFORE_FIRST_GROUP.store(true, Ordering::Relaxed);
}

/// Called by the fabric before it makes a group's communicator: strikes an
/// armed `group` fault, once. Its peers then meet a stopped rank inside
/// `MPI_Comm_dup`, the case [`bounded`] is for.
pub(super) fn before_making_a_group(rank: usize) {
    if HANG_BEFORE_FIRST_GROUP.swap(false, Ordering::Relaxed) {
        stop_this_process(rank);
    }
}

/// Tests: stops every thread of this process (SIGSTOP), as a rank that
/// hangs: alive, silent, ended only by the launcher's SIGKILL.
pub fn stop_this_process(rank: usize) {
    eprintln!("lowcomm (mpi rank {rank}): LOWCOMM_FAULT: hang now");
    // SAFETY: raise only sends this process a signal.
    unsafe { libc::raise(libc::SIGSTOP) };
}
