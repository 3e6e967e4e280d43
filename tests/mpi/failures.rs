//! A job that cannot go on ends with one clear error, not a hang: a rank
//! that diverges, crashes, hangs (in a collective or before a group's
//! communicator is made) or whose `MPI_Abort` never returns, and the
//! settings MPI refuses before writing anything (`--runtime sim`, a wrong
//! worker count, a fault plan). Part of tests/mpi.rs.

use super::*;
use std::time::{Duration, Instant};

/// Runs a job in which rank 1 fails after 1.5 s; returns its output and how
/// long it took.
fn failing_job(fault: &str) -> (Output, Duration) {
    failing_job_with(&[("LOWCOMM_FAULT", fault)])
}

/// [`failing_job`] with the fault given as environment variables.
fn failing_job_with(fault: &[(&str, &str)]) -> (Output, Duration) {
    let tmp = tempdir();
    let out = tmp.path().join("run");
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
    let cfg = cfg.display().to_string();
    let t = Instant::now();
    let env = [fault, &[("LOWCOMM_MPI_TIMEOUT_S", "5")]].concat();
    let o = mpirun(
        2,
        &env,
        &["train", "--config", &cfg, "--backend", "mpi", "--method", "acco", "--steps", "100000", "--quiet"],
        tmp.path(),
    );
    (o, t.elapsed())
}

#[test]
fn an_mpi_run_that_diverges_says_so_and_leaves_no_temp_checkpoint() {
    let tmp = tempdir();
    let out = tmp.path().join("run");
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
    let cfg = cfg.display().to_string();
    let args = ["train", "--config", &cfg, "--backend", "mpi", "--method", "ddp", "--steps", "10"];
    let o = mpirun(2, &[], &[&args[..], &["--checkpoint-every", "1", "--lr", "1e30", "--quiet"]].concat(), tmp.path());
    let said = text(&o);
    assert!(!o.status.success(), "a diverged run must fail:\n{said}");
    assert!(said.contains("training diverged"), "{said}");
    assert!(!said.contains("does not parse"), "{said}");
    let left: Vec<String> = lowcomm::util::fsio::dir_entries(&out.join("checkpoints"))
        .unwrap()
        .into_iter()
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temp checkpoint directories left behind: {left:?}");
    lowcomm::checkpoint::load(&out).expect("the last finite checkpoint loads");
}

#[test]
fn a_rank_that_crashes_ends_the_job_with_an_error() {
    let (o, took) = failing_job("abort:1:1.5");
    assert!(!o.status.success());
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let out = text(&o);
    assert!(out.contains("rank 1") && out.contains("abort now"), "{out}");
}

#[test]
fn a_rank_that_hangs_ends_the_job_at_the_collective_timeout() {
    let (o, took) = failing_job("hang:1:1.5");
    assert_ended_at_the_timeout(&o, took);
}

#[test]
fn a_rank_that_hangs_before_a_group_is_made_ends_the_job_at_the_timeout() {
    // Rank 1 stops just before it makes its first group's communicator (the
    // World group's, on the first collective), as in a CI run whose startup
    // took longer than the 1.5 s above: making one (MPI_Comm_dup) waits on
    // every member and has no non-blocking form, so only the deadline
    // around it (comm/mpi/failure.rs `bounded`) ends the job. Without it,
    // rank 0 waited inside MPI_Comm_dup until hydra's limit.
    let (o, took) = failing_job("hang:1:group");
    assert_ended_at_the_timeout(&o, took);
    assert!(text(&o).contains("making the communicator of ranks"), "{}", text(&o));
}

/// The job failed, within a minute, with rank 0's line naming the 5 s timeout.
fn assert_ended_at_the_timeout(o: &Output, took: Duration) {
    let out = text(o);
    assert!(!o.status.success(), "{out}");
    // The fault + the 5 s timeout, with room for a loaded machine.
    assert!(took < Duration::from_secs(60), "took {took:?}: {out}");
    assert!(out.contains("did not complete in 5 s") && out.contains("aborting all ranks"), "{out}");
}

#[test]
fn a_rank_whose_mpi_abort_never_returns_still_ends_the_job() {
    // Seen once under load: MPI_Abort stayed inside MPICH for minutes. The
    // fault stands in for it; the watchdog must end the rank (10 s), and
    // the launcher the others. Before the watchdog, hydra's own timeout
    // (90 s here) ended the job, without the watchdog's line.
    let (o, took) = failing_job_with(&[
        ("LOWCOMM_FAULT", "hang:1:1.5"),
        ("LOWCOMM_FAULT_ABORT_HANGS", "1"),
        ("MPIEXEC_TIMEOUT", "90"),
    ]);
    assert!(!o.status.success());
    let out = text(&o);
    assert!(
        out.contains("did not complete in 5 s") && out.contains("MPI_Abort did not end this rank in 10 s"),
        "{out}"
    );
    assert!(took < Duration::from_secs(85), "took {took:?}: {out}");
}

#[test]
fn mpi_backend_rejects_sim_runtime_and_wrong_worker_count() {
    let tmp = tempdir();
    let cfg = tmp.path().join("run.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &tmp.path().join("run"))).unwrap();
    let cfg = cfg.display().to_string();
    for (extra, needle) in [(["--runtime", "sim"], "--runtime sim"), (["--workers", "3"], "mpirun -np 3")] {
        let o = mpirun(
            2,
            &[],
            &[&["train", "--config", &cfg, "--backend", "mpi", "--method", "zero1"][..], &extra[..]].concat(),
            tmp.path(),
        );
        assert!(!o.status.success());
        assert!(text(&o).contains(needle), "{}", text(&o));
    }
}

#[test]
fn mpi_backend_refuses_a_fault_plan_before_writing_anything() {
    // MPI has no recovery (a dead rank ends the job): workers that leave and join run in-process only.
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let args = ["train", "--config", &cfg, "--backend", "mpi", "--method", "async-diloco", "--workers", "2"];
    let o = mpirun(3, &[], &[&args[..], &["--faults", "1:crash@1,1:join@2"]].concat(), tmp.path());
    assert!(!o.status.success());
    assert!(
        text(&o).contains("--faults / [faults] plan: not under --backend mpi: MPI has no recovery"),
        "{}",
        text(&o)
    );
    assert!(!tmp.path().join("run").exists(), "nothing written");
}
