//! Ctrl-C under `mpirun`: every rank stops at one round with a checkpoint,
//! and the resumed run has the uninterrupted run's bits. Part of tests/mpi.rs.

use super::*;
use std::time::{Duration, Instant};

/// Starts `mpirun -np np lowcomm ARGS` in `cwd` without waiting.
fn spawn_mpirun(np: usize, args: &[&str], cwd: &Path) -> std::process::Child {
    mpirun_command(np, &[], args, cwd)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn mpirun")
}

#[test]
fn ctrl_c_under_mpirun_stops_every_rank_at_one_round_and_the_resumed_run_has_the_uninterrupted_bits() {
    // hydra forwards SIGINT to every rank; the ranks vote on it at each
    // boundary (strategy/stop.rs) and all stop at the same one with a
    // checkpoint, exit 130 and the mpirun command that continues the run.
    // async-diloco: the server decides alone and tells the workers (SAVE_STOP).
    for (method, np, extra) in
        [("zero1", 2, vec![]), ("diloco", 2, vec!["--h", "3"]), ("async-diloco", 3, vec!["--workers", "2", "--h", "3"])]
    {
        let tmp = tempdir();
        let steps = "300";
        let (whole, cut) = (tmp.path().join("whole"), tmp.path().join("cut"));
        let cfg = tmp.path().join("run.toml");
        std::fs::write(&cfg, tiny_toml(corpus(), &whole)).unwrap();
        let cfg = cfg.display().to_string();
        let args = |out: &Path| {
            let mut a =
                vec!["train", "--config", &cfg, "--method", method, "--steps", steps, "--quiet", "--backend", "mpi"];
            a.extend(["--checkpoint-every", "5", "--out"]);
            a.push(out.to_str().unwrap());
            a.extend(&extra);
            a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let child = spawn_mpirun(np, &args(&cut).iter().map(String::as_str).collect::<Vec<_>>(), tmp.path());
        let start = Instant::now();
        while !cut.join("checkpoints/latest").exists() {
            assert!(start.elapsed() < Duration::from_secs(120), "{method}: no first checkpoint");
            std::thread::sleep(Duration::from_millis(20));
        }
        let ok = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success();
        assert!(ok);
        let o = child.wait_with_output().unwrap();
        let said = text(&o);
        // Every rank exits 130, but hydra's own status after a forwarded Ctrl-C is not reliable: it
        // returned 0 in about 1 of 3 interrupts on this machine (docs/mpi.md). So: never a failure,
        // and the stop is checked by what the ranks print and write below.
        assert!(
            matches!(o.status.code(), Some(130) | Some(0)),
            "{method}: exit status of an interrupted MPI run:\n{said}"
        );
        let resume = format!("continue the run with `mpirun -np {np} lowcomm train --resume {}`", cut.display());
        assert!(said.contains("interrupted: stopped at step ") && said.contains(&resume), "{method}:\n{said}");
        // Rank 0's watcher thread announces the stop every 50 ms at most, so a stop reached sooner may
        // end before it speaks; no other rank ever does.
        assert!(said.matches("interrupt: stopping at the end").count() <= 1, "{method}: one rank speaks:\n{said}");
        let at: u64 = said.split("stopped at step ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(at < 300, "{method}: the run ended before the signal: the test checked nothing");
        assert_eq!(lowcomm::checkpoint::load(&cut).unwrap().state.step, at, "{method}");
        let cut_s = cut.display().to_string();
        let o = mpirun(np, &[], &["train", "--resume", &cut_s, "--backend", "mpi", "--quiet"], tmp.path());
        assert!(o.status.success(), "{method}: resume: {}", text(&o));
        let resumed = lowcomm::checkpoint::load(&cut).unwrap();
        assert_eq!(resumed.state.step, 300, "{method}");
        // Workers under a server race by design (real runtime): only the synchronous methods are bit-exact.
        if method != "async-diloco" {
            let o = mpirun(np, &[], &args(&whole).iter().map(String::as_str).collect::<Vec<_>>(), tmp.path());
            assert!(o.status.success(), "{method}: uninterrupted: {}", text(&o));
            let whole = lowcomm::checkpoint::load(&whole).unwrap();
            assert!(
                whole.params == resumed.params,
                "{method}: interrupted at {at} and resumed differs from uninterrupted"
            );
        }
    }
}
