//! Bad input gets one clear error before anything is created (issue 27,
//! items 4-7): whole numbers beyond what config.toml holds, paths that are
//! not UTF-8, a run that cannot fit in memory (train/memory.rs), a round
//! that would take hours (train/duration.rs; `--yes` starts it anyway).

mod common;

use common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `lowcomm args...` in `cwd` under `ulimit -v KB` (address space).
fn under_ulimit(cwd: &Path, kb: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kb} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_lowcomm"))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn whole_numbers_beyond_toml_are_refused_at_parse_time_and_nothing_is_created() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    for flag in ["--steps", "--seed", "--eval-every", "--checkpoint-every"] {
        let o = lowcomm_in(tmp.path(), &["train", "--config", &config, flag, "9223372036854775808"]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr_text(&o));
        assert_mentions(&stderr_text(&o), &[flag, "must be at most 9223372036854775807"]);
        assert!(!tmp.path().join("run").exists(), "{flag}: the run directory was created");
    }
    // The largest that fits is taken; the run is then refused for what it is, or runs.
    let o = lowcomm_in(
        tmp.path(),
        &["train", "--config", &config, "--quiet", "--steps", "3", "--seed", "9223372036854775807"],
    );
    assert!(o.status.success(), "{}", stderr_text(&o));
    let saved = std::fs::read_to_string(tmp.path().join("run/config.toml")).unwrap();
    assert!(saved.contains("seed = 9223372036854775807"), "{saved}");
}

#[test]
fn a_path_that_is_not_utf8_is_refused_with_one_line_and_nothing_is_created() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let bad = OsStr::from_bytes(b"r\xff");
    // A corpus copy under a non-UTF-8 name: it exists, so only the name is wrong.
    let data = tmp.path().join(OsStr::from_bytes(b"d\xffta"));
    copy_dir(corpus(), &data);
    for (flag, value) in [("--out", bad), ("--data", data.as_os_str())] {
        let o = Command::new(env!("CARGO_BIN_EXE_lowcomm"))
            .args(["train".as_ref(), "--config".as_ref(), OsStr::new(&config), OsStr::new(flag), value])
            .current_dir(tmp.path())
            .output()
            .unwrap();
        assert_one_error(o, &[flag, "path contains invalid UTF-8", "use a path that is valid UTF-8"]);
    }
    assert!(!tmp.path().join(bad).exists() && !tmp.path().join("run").exists(), "a run directory was created");
}

#[test]
fn a_run_that_cannot_fit_is_refused_with_its_estimate_and_what_is_available() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    // A limit given to the check (as a test sets it): refused before any allocation.
    let o = Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(["train", "--config", &config, "--workers", "8", "--runtime", "sim"])
        .env("LOWCOMM_MEMORY_AVAILABLE", "1000000")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_one_error(
        o,
        &[
            "this run needs about",
            "8 workers x",
            "this machine has 1.0 MB available (LOWCOMM_MEMORY_AVAILABLE)",
            "--yes",
        ],
    );
    assert!(!tmp.path().join("run").exists());
    // The probes of issue 27, under a real 3.2 GB address-space limit: they aborted (134) before.
    let probes: [&[&str]; 2] =
        [&["--workers", "1000", "--runtime", "sim", "--steps", "5"], &["--batch-size", "100000000"]];
    for probe in probes {
        let mut args = vec!["train", "--config", &config];
        args.extend(probe);
        let o = under_ulimit(tmp.path(), 3_200_000, &args);
        assert_eq!(o.status.code(), Some(1), "{probe:?}: {}", stderr_text(&o));
        assert_one_error(o, &["this run needs about", "available (the address-space limit (ulimit -v)"]);
        assert!(!tmp.path().join("run").exists());
    }
    // What fits runs under the same limit.
    let o = under_ulimit(
        tmp.path(),
        3_200_000,
        &["train", "--config", &config, "--quiet", "--workers", "4", "--runtime", "sim", "--steps", "3"],
    );
    assert!(o.status.success(), "{}", stderr_text(&o));
}

#[test]
fn a_round_that_would_take_years_is_refused_and_yes_starts_it() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    for probe in [["--link", "1bit,1us"], ["--speeds", "1,1e-9"]] {
        let mut args = vec!["train", "--config", &config, "--workers", "2", "--runtime", "real", "--steps", "5"];
        args.extend(probe);
        let o = lowcomm_in(tmp.path(), &args);
        assert_one_error(o, &["one round of ddp would take at least", "over the bound of 1.0 h per round", "--yes"]);
        assert!(!tmp.path().join("run").exists());
    }
    // --yes: a warning, and the run starts (stopped here by two SIGINTs: its first round never ends).
    let args = [
        "train",
        "--config",
        &config,
        "--workers",
        "2",
        "--runtime",
        "real",
        "--steps",
        "5",
        "--link",
        "1bit,1us",
        "--yes",
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_lowcomm"))
        .args(args)
        .current_dir(tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lock = tmp.path().join("run").join(lowcomm::train::lock::LOCK_FILE);
    let start = Instant::now();
    while !std::fs::read_to_string(&lock).is_ok_and(|t| t.starts_with(&format!("pid {}\n", child.id()))) {
        assert!(start.elapsed() < Duration::from_secs(60), "the run never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..2 {
        Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = child.wait_with_output().unwrap();
    let said = stderr_text(&o);
    assert!(
        said.contains("warning: one round of ddp would take at least") && said.contains("starting anyway (--yes)"),
        "{said}"
    );
    assert!(said.contains("training "), "the run started:\n{said}");
}
