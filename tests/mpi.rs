//! The MPI backend under a real `mpirun` (MPICH), 2 and 4 processes:
//! conformance of the communicator, bitwise equivalence with the
//! in-process backend for zero1, acco and the local-update methods,
//! `compare` over MPI; a dead or silent rank ending the job with a clear
//! error instead of a hang (mpi/failures.rs), Ctrl-C (mpi/stop.rs).
//!
//! Only with `cargo test --features mpi` (.ci/run installs MPICH); needs
//! `mpirun` on PATH.
#![cfg(feature = "mpi")]

mod common;
#[path = "mpi/failures.rs"]
mod failures;
#[path = "mpi/stop.rs"]
mod stop;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_lowcomm");

fn mpirun(np: usize, env: &[(&str, &str)], args: &[&str], cwd: &Path) -> Output {
    mpirun_command(np, env, args, cwd)
        .output()
        .expect("spawn mpirun: is MPICH installed (apt-get install mpich libmpich-dev)?")
}

/// `mpirun -np np lowcomm ARGS` in `cwd`, as every test launches it.
fn mpirun_command(np: usize, env: &[(&str, &str)], args: &[&str], cwd: &Path) -> Command {
    let mut c = Command::new("mpirun");
    c.arg("-np").arg(np.to_string()).arg(BIN).args(args).current_dir(cwd);
    // glibc keeps big temporaries mapped instead of faulting them in anew
    // (docs/mpi.md).
    c.env("MALLOC_MMAP_MAX_", "0").env("MALLOC_TRIM_THRESHOLD_", "68719476736");
    // A job that hangs fails its test after 5 minutes (hydra ends it)
    // instead of holding the suite, and CI, for ever.
    c.env("MPIEXEC_TIMEOUT", "300");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn comm_and_engine_conformance_on_2_4_and_5_ranks() {
    // Collectives, groups and messages of the backend; then the engine's
    // primitives (grouped collectives, typed payloads, a server with
    // receive-any and a deadline, tasks in flight) over MPI, against the
    // simulator: 1 worker + server, 3 workers + server, 2x2 + server.
    let tmp = tempdir();
    for (np, per_node, shape) in [
        (2, None, "1 workers in nodes of 1"),
        (4, None, "3 workers in nodes of 3"),
        (5, Some("2"), "4 workers in nodes of 2"),
    ] {
        let env: Vec<(&str, &str)> = per_node.map(|k| ("LOWCOMM_RANKS_PER_NODE", k)).into_iter().collect();
        let o = mpirun(np, &env, &["comm-check", "--backend", "mpi"], tmp.path());
        let out = text(&o);
        assert!(o.status.success(), "np={np}: {out}");
        assert!(out.contains(&format!("all {np} ranks passed")), "{out}");
        assert!(
            out.contains("groups and messages")
                && out.contains(&format!("primitives on {shape} + a server agree with the simulator")),
            "{out}"
        );
    }
}

/// `lowcomm train` of the tiny model: in-process with `--workers np`, or
/// over MPI with `np` ranks; returns the final parameters' bits and the
/// per-round losses.
fn train(tmp: &Path, backend: &str, method: &str, np: usize) -> (Vec<u32>, Vec<f64>) {
    train_env(tmp, backend, method, np, &[])
}

#[test]
fn the_auto_wait_sleeps_only_beside_a_computing_worker_in_a_group_across_machines() {
    use lowcomm::comm::mpi::Wait;
    // A group on one machine moves through shared memory: yield always.
    assert_eq!(Wait::Auto.for_group(true).now(true), Wait::Yield);
    assert_eq!(Wait::Auto.for_group(true).now(false), Wait::Yield);
    // Across machines: sleep while the worker computes, yield while it waits.
    assert_eq!(Wait::Auto.for_group(false).now(true), Wait::Sleep);
    assert_eq!(Wait::Auto.for_group(false).now(false), Wait::Yield);
    // A wait set by hand stays what it is.
    for w in [Wait::Spin, Wait::Yield, Wait::Sleep] {
        for (one_machine, computing) in [(true, true), (false, true), (false, false)] {
            assert_eq!(w.for_group(one_machine).now(computing), w);
        }
    }
}

/// `env`: environment variables for mpirun; entries whose key starts with
/// `--` are flags of the in-process run instead.
fn train_env(tmp: &Path, backend: &str, method: &str, np: usize, env: &[(&str, &str)]) -> (Vec<u32>, Vec<f64>) {
    let out = tmp.join(format!("{backend}-{method}-{np}-{}", env.len()));
    let cfg = tmp.join(format!("{backend}-{method}-{np}.toml"));
    std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
    let cfg = cfg.display().to_string();
    let mut args = vec!["train", "--config", &cfg, "--method", method, "--steps", "4", "--quiet"];
    // Fixed micro-batch counts make the overlapping methods timing-independent;
    // the flag is refused for the methods it does not apply to.
    if matches!(method, "dpu" | "acco-wp" | "acco") {
        args.extend(["--fixed-micro-batches", "1"]);
    }
    let o = if backend == "mpi" {
        mpirun(np, env, &[&args[..], &["--backend", "mpi"]].concat(), tmp)
    } else {
        let w = np.to_string();
        let flags: Vec<&str> = env.iter().filter(|(k, _)| k.starts_with("--")).flat_map(|(k, v)| [*k, *v]).collect();
        Command::new(BIN).args(&args).args(["--workers", &w]).args(flags).current_dir(tmp).output().unwrap()
    };
    assert!(o.status.success(), "{backend} {method} np={np}: {}", text(&o));
    let ck = lowcomm::checkpoint::load(&out).expect("final checkpoint");
    let losses = records(&read_metrics(&out), "train").iter().map(|r| r["loss"].as_f64().unwrap()).collect();
    (ck.params.iter().map(|x| x.to_bits()).collect(), losses)
}

#[test]
fn zero1_and_acco_over_mpi_give_the_in_process_bits() {
    let tmp = tempdir();
    for np in [2, 4] {
        for method in ["zero1", "acco"] {
            let (local, local_losses) = train(tmp.path(), "local", method, np);
            let (mpi, mpi_losses) = train(tmp.path(), "mpi", method, np);
            assert_eq!(local_losses, mpi_losses, "{method} np={np}: losses differ");
            assert!(local == mpi, "{method} np={np}: final parameters differ between backends");
        }
    }
}

/// `lowcomm train` of the tiny model with `extra` flags, in-process or over
/// MPI; returns the final parameters' bits and the per-round losses.
fn train_with(tmp: &Path, backend: &str, method: &str, np: usize, extra: &[&str]) -> (Vec<u32>, Vec<f64>) {
    let tag = extra.join("").replace('-', "");
    let out = tmp.join(format!("{backend}-{method}-{np}-{tag}"));
    let cfg = tmp.join(format!("{backend}-{method}-{np}-{tag}.toml"));
    std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
    let cfg = cfg.display().to_string();
    let mut args = vec!["train", "--config", &cfg, "--method", method, "--steps", "5", "--quiet"];
    args.extend(extra);
    let o = if backend == "mpi" {
        mpirun(np, &[], &[&args[..], &["--backend", "mpi"]].concat(), tmp)
    } else {
        let w = np.to_string();
        Command::new(BIN).args(&args).args(["--workers", &w]).current_dir(tmp).output().unwrap()
    };
    assert!(o.status.success(), "{backend} {method} {extra:?} np={np}: {}", text(&o));
    let ck = lowcomm::checkpoint::load(&out).expect("final checkpoint");
    let losses = records(&read_metrics(&out), "train").iter().map(|r| r["loss"].as_f64().unwrap()).collect();
    (ck.params.iter().map(|x| x.to_bits()).collect(), losses)
}

#[test]
fn local_update_methods_over_mpi_give_the_in_process_bits() {
    // tau 2 over 5 steps: rounds of 2, 2 and 1; co2 with its penalty on
    // (replicas' outer iterates differ, the run ends on the average) and
    // with its outer state sharded.
    let tmp = tempdir();
    for np in [2, 4] {
        for (method, extra) in [
            ("local-sgd", &["--tau", "2", "--inner-state", "average"][..]),
            ("overlap-local-sgd", &["--tau", "2"][..]),
            ("slowmo", &["--tau", "2"][..]),
            ("co2", &["--tau", "2"][..]),
            ("co2", &["--tau", "2", "--shard-outer"][..]),
            ("diloco", &["--h", "2"][..]),
            ("diloco", &["--h", "2", "--outer", "dn", "--dn-buffer", "2", "--dn-c", "0.25", "--wire", "bf16"][..]),
        ] {
            let (local, local_losses) = train_with(tmp.path(), "local", method, np, extra);
            let (mpi, mpi_losses) = train_with(tmp.path(), "mpi", method, np, extra);
            assert_eq!(local_losses, mpi_losses, "{method} {extra:?} np={np}: losses differ");
            assert!(local == mpi, "{method} {extra:?} np={np}: final parameters differ between backends");
        }
    }
}

#[test]
fn async_diloco_runs_4_workers_and_the_server_on_the_last_of_5_ranks() {
    // mpirun -np 5 --workers 4: the server is rank 4. Equal speeds, fixed shards and a
    // grace period covering everyone: every round is synchronous, so the
    // result is the simulator's up to the order in which the server summed
    // the arrivals (DN with N = 4 accumulates them).
    let tmp = tempdir();
    // Fixed shards: which worker trains which shard does not depend on arrival order.
    let extra = ["--h", "2", "--outer", "dn", "--dn-buffer", "4", "--grace", "1000000", "--fixed-shards"];
    let run = |backend: &str, rt: &str| {
        let out = tmp.path().join(format!("async-{backend}-{rt}"));
        let cfg = tmp.path().join(format!("async-{backend}-{rt}.toml"));
        std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
        let cfg = cfg.display().to_string();
        let mut args = vec!["train", "--config", &cfg, "--method", "async-diloco", "--workers", "4", "--steps", "4"];
        args.extend(extra);
        args.extend(["--runtime", rt]);
        let o = if backend == "mpi" {
            mpirun(5, &[], &[&args[..], &["--backend", "mpi"]].concat(), tmp.path())
        } else {
            Command::new(BIN).args(&args).current_dir(tmp.path()).output().unwrap()
        };
        assert!(o.status.success(), "{backend} {rt}: {}", text(&o));
        // The pooled curve follows the order the worker rounds ended in,
        // though rank 0 gets the other ranks' rounds a rank at a time.
        let walls: Vec<f64> =
            records(&read_metrics(&out), "train").iter().map(|r| r["wall_s"].as_f64().unwrap()).collect();
        assert!(walls.len() == 4 && walls.windows(2).all(|w| w[0] <= w[1]), "{backend} {rt}: {walls:?}");
        (lowcomm::checkpoint::load(&out).expect("final checkpoint").params, text(&o))
    };
    let (sim, _) = run("local", "sim");
    let (mpi, out) = run("mpi", "real");
    assert!(out.contains("on 4 workers + a parameter server"), "{out}");
    assert!(out.contains("server (participant 4): 8 updates applied"), "{out}");
    let worst = sim.iter().zip(&mpi).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "max |sim - mpi| = {worst}");
    // The wrong number of ranks says how many a server needs.
    let cfg = tmp.path().join("async-ranks.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &tmp.path().join("async-ranks"))).unwrap();
    let cfg = cfg.display().to_string();
    let args = ["train", "--config", &cfg, "--method", "async-diloco", "--workers", "4", "--backend", "mpi"];
    let o = mpirun(4, &[], &args, tmp.path());
    assert!(!o.status.success());
    assert!(text(&o).contains("needs workers + 1 ranks (the server is the last), e.g. mpirun -np 5"), "{}", text(&o));
}

#[test]
fn ddp_over_a_2x2_mpi_topology_gives_the_in_process_bits() {
    // 2 "nodes" x 2 ranks: the world all-reduce keeps the rank-order recipe
    // (a strategy that wants the two-level algorithm starts it as its own
    // task), so the bits equal the in-process run's.
    let tmp = tempdir();
    let (local, local_losses) = train(tmp.path(), "local", "ddp", 4);
    let (mpi, mpi_losses) = train_env(tmp.path(), "mpi", "ddp", 4, &[("LOWCOMM_RANKS_PER_NODE", "2")]);
    assert_eq!(local_losses, mpi_losses);
    assert!(local == mpi, "final parameters differ between backends");
}

#[test]
fn flexdemo_over_a_2x2_mpi_topology_gives_the_in_process_bits() {
    // 2 nodes x 2 ranks: reduce-scatter in the node, the DeMo all-gather
    // across nodes, all-gather in the node; in-process with --nodes 2.
    let tmp = tempdir();
    let (local, local_losses) = train_env(tmp.path(), "local", "flexdemo", 4, &[("--nodes", "2")]);
    let (mpi, mpi_losses) = train_env(tmp.path(), "mpi", "flexdemo", 4, &[("LOWCOMM_RANKS_PER_NODE", "2")]);
    assert_eq!(local_losses, mpi_losses);
    assert!(local == mpi, "final parameters differ between backends");
}

#[test]
fn mpi_runs_resume_from_per_rank_parts_bit_identically() {
    // Each rank writes its part; rank 0 the manifest. Stop at round 2 of 4,
    // resume under mpirun: the in-process uninterrupted run's bits.
    let tmp = tempdir();
    let (local, local_losses) = train(tmp.path(), "local", "zero1", 2);
    let out = tmp.path().join("mpi-resume");
    let cfg = tmp.path().join("mpi-resume.toml");
    std::fs::write(&cfg, tiny_toml(corpus(), &out)).unwrap();
    let cfg = cfg.display().to_string();
    let base = ["train", "--config", &cfg, "--method", "zero1", "--steps", "4", "--quiet", "--backend", "mpi"];
    let o = mpirun(2, &[], &[&base[..], &["--stop-at", "2"]].concat(), tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    let ck = lowcomm::checkpoint::load(&out).expect("checkpoint at round 2");
    assert_eq!(ck.state.step, 2);
    assert_eq!(ck.state.parallel.as_ref().map(|p| p.parts.len()), Some(2));
    let out_s = out.display().to_string();
    // The wrong job size is named as the checkpoint's workers, not as a
    // --workers flag the user never gave (issue 27, item 11).
    let o = mpirun(3, &[], &["train", "--resume", &out_s, "--backend", "mpi", "--quiet"], tmp.path());
    assert!(!o.status.success());
    let said = text(&o);
    assert!(said.contains("has 2 workers, this MPI job has 3 ranks: resume it with mpirun -np 2"), "{said}");
    assert!(!said.contains("--workers 2 but"), "{said}");
    let o = mpirun(2, &[], &["train", "--resume", &out_s, "--backend", "mpi", "--quiet"], tmp.path());
    assert!(o.status.success(), "{}", text(&o));
    let resumed: Vec<u32> = lowcomm::checkpoint::load(&out).unwrap().params.iter().map(|x| x.to_bits()).collect();
    assert!(resumed == local, "resumed MPI run differs from the uninterrupted in-process run");
    let losses: Vec<f64> = records(&read_metrics(&out), "train").iter().map(|r| r["loss"].as_f64().unwrap()).collect();
    assert_eq!(losses, local_losses, "every rank's rounds reach rank 0's log through the parts");
}

#[test]
fn compare_over_mpi_matches_the_in_process_compare_and_reuses_finished_methods() {
    // Rank 0 writes the report; every rank decides reuse from the same
    // result.json (one machine here: a shared filesystem).
    let tmp = tempdir();
    let cfg = tiny_toml_file(tmp.path());
    let compare = |results: &str| {
        ["compare", "--methods", "ddp,zero1", "--config", &cfg, "--steps", "3", "--quiet", "--results", results]
            .map(String::from)
            .to_vec()
    };
    let run_mpi = || {
        let args = [compare("mpi-cmp"), vec!["--backend".into(), "mpi".into()]].concat();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        mpirun(2, &[], &args, tmp.path())
    };
    let o = run_mpi();
    assert!(o.status.success(), "{}", text(&o));
    let local = Command::new(BIN).args(compare("local-cmp")).args(["--workers", "2"]).current_dir(tmp.path()).output();
    let local = local.unwrap();
    assert!(local.status.success(), "{}", text(&local));
    // The same final losses, method by method (the backends give the same bits).
    let finals = |dir: &str| {
        let md = std::fs::read_to_string(tmp.path().join(dir).join("summary.md")).unwrap();
        md.lines()
            .filter(|l| l.starts_with("| ddp |") || l.starts_with("| zero1 |"))
            .take(2) // the first table's rows: rounds, tokens, final train loss, ...
            .map(|l| l.split('|').nth(4).unwrap().trim().to_string())
            .collect::<Vec<_>>()
    };
    let (mpi_finals, local_finals) = (finals("mpi-cmp"), finals("local-cmp"));
    assert_eq!(mpi_finals.len(), 2, "{mpi_finals:?}");
    assert_eq!(mpi_finals, local_finals);
    // Run again: both methods are reused, nothing reruns.
    let again = text(&run_mpi());
    for m in ["[1/2] ddp", "[2/2] zero1"] {
        assert!(again.contains(&format!("compare {m}: done earlier, reused")), "{m}: {again}");
    }
    assert!(!again.contains(": running"), "{again}");
}

#[test]
fn calibrate_under_mpirun_measures_the_link_between_ranks() {
    // Two ranks on this machine: one node of 2, the intra tier measured
    // between them (ping-pong and all-reduce); with one rank per node
    // (LOWCOMM_RANKS_PER_NODE=1) the same pair is two nodes and the inter
    // tier is measured. Fast settings: a few seconds each.
    let tmp = tempdir();
    let fast = ["--batch-size", "2", "--seq-len", "16", "--repeats", "2", "--warmup", "0", "--max-bytes", "65536"];
    for (per_node, tier, shape) in [(None, "intra", (1, 2)), (Some("1"), "inter", (2, 1))] {
        let out = tmp.path().join(format!("{tier}.toml"));
        let out_s = out.display().to_string();
        let env: Vec<(&str, &str)> = per_node.map(|k| ("LOWCOMM_RANKS_PER_NODE", k)).into_iter().collect();
        let args = [&["calibrate", "--backend", "mpi", "--out", &out_s][..], &fast].concat();
        let o = mpirun(2, &env, &args, tmp.path());
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert!(t.contains(&format!("{tier}-node link: ping-pong")) && t.contains("wrote"), "{t}");
        let p = lowcomm::runtime::cluster::ClusterProfile::from_file(&out).unwrap();
        assert_eq!((p.nodes, p.workers_per_node), shape);
        let profile = std::fs::read_to_string(&out).unwrap();
        assert!(
            profile.contains(&format!("# {tier}: measured, MPI ranks")) && profile.contains("ping-pong (one way"),
            "{profile}"
        );
        // Both ranks computed at once on this machine, however they are grouped.
        assert_eq!(profile.contains("Here 2 ranks shared this machine"), per_node.is_some(), "{profile}");
        // Both ranks on one kernel (the same boot id): the shared-cores
        // factor, one transfer of the two of the overlap's all-reduce.
        let d = p.device.as_ref().expect("calibrate writes [device]");
        let (overlap, shared) = (d.overlap_compute_factor.unwrap(), d.shared_cores_compute_factor);
        assert_eq!(shared, Some(1.0 + (overlap - 1.0) / 2.0), "{profile}");
        let link = p.link_model().unwrap();
        let t = if tier == "intra" { link.intra } else { link.inter.unwrap() };
        assert!(t.bandwidth_bytes_per_s > 0.0 && t.latency_s >= 0.0, "{t:?}");
    }
}
