//! `lowcomm train` flags that could not take effect: each is either honoured
//! or refused with one error naming the flag and the fix. Before, --trace
//! on a single-process run, --fixed-micro-batches on ddp, --dn-c without
//! --outer dn, --outer-momentum with --outer sgd and --link next to
//! --cluster were accepted and ignored (or, for --link, silently replaced
//! the profile's links).

mod common;

use common::*;
use std::path::Path;
use std::process::Output;

/// The tiny run's config (out: `dir/run`) with `extra` TOML appended.
fn config(dir: &Path, extra: &str) -> String {
    let path = dir.join("run.toml");
    std::fs::write(&path, tiny_toml(corpus(), &dir.join("run")) + extra).unwrap();
    path.display().to_string()
}

/// `lowcomm train --config CFG --steps 2 --quiet EXTRA` in `dir`.
fn train(dir: &Path, cfg: &str, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--config", cfg, "--steps", "2", "--quiet"];
    args.extend(extra);
    lowcomm_in(dir, &args)
}

#[track_caller]
fn succeeds(o: &Output) -> String {
    assert!(o.status.success(), "{}", stderr_text(o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn data_parallel_flags_without_method_run_ddp_and_do_what_they_ask() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let trace = tmp.path().join("t.json");
    let out = succeeds(&train(tmp.path(), &cfg, &["--trace", &trace.display().to_string()]));
    assert!(out.contains("method ddp  workers 1"), "{out}");
    assert!(trace.is_file(), "--trace wrote no trace");
    let out = succeeds(&train(tmp.path(), &cfg, &["--wire", "bf16", "--out", "run-bf16"]));
    assert!(out.contains("method ddp  workers 1"), "{out}");
}

#[test]
fn a_method_flag_without_method_names_the_flag_and_asks_for_method() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    assert_one_error(
        train(tmp.path(), &cfg, &["--tau", "3"]),
        &["--tau is a setting of local-sgd, overlap-local-sgd, slowmo, co2", "single-process", "pass --method"],
    );
    assert_one_error(
        train(tmp.path(), &cfg, &["--fixed-micro-batches", "3"]),
        &["--fixed-micro-batches is a setting of dpu, acco-wp, acco", "pass --method, e.g. --method dpu"],
    );
    // --workers without --method runs ddp, which has no --tau: the error says so without "[methods.ddp]".
    let o = train(tmp.path(), &cfg, &["--workers", "2", "--tau", "3"]);
    assert!(!stderr_text(&o).contains("[methods.ddp]"), "{}", stderr_text(&o));
    assert_one_error(o, &["--tau is a setting of", "not of ddp", "--method was not given", "pass --method"]);
    assert!(!tmp.path().join("run").exists(), "a refused run left a directory");
}

#[test]
fn method_flags_that_cannot_take_effect_are_refused() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let w2 = ["--workers", "2", "--runtime", "sim"];
    let run = |extra: &[&str]| train(tmp.path(), &cfg, &[&w2[..], extra].concat());
    assert_one_error(
        run(&["--method", "ddp", "--fixed-micro-batches", "2"]),
        &["--fixed-micro-batches is a setting of dpu, acco-wp, acco, not of ddp", "drop --fixed-micro-batches"],
    );
    assert_one_error(
        run(&["--method", "diloco", "--dn-c", "0.1"]),
        &["--dn-c is a setting of Delayed Nesterov (--outer dn)", "default outer optimizer nesterov", "add --outer dn"],
    );
    assert_one_error(
        run(&["--method", "async-diloco", "--outer", "sgd-momentum", "--dn-buffer", "2"]),
        &["--dn-buffer", "not of --outer sgd-momentum", "add --outer dn"],
    );
    assert_one_error(
        run(&["--method", "diloco", "--outer", "sgd", "--outer-momentum", "0.5"]),
        &["--outer-momentum would be ignored", "--outer sgd has no momentum", "--outer sgd-momentum"],
    );
    assert!(!tmp.path().join("run").exists(), "a refused run left a directory");
    // Where they take effect they run.
    succeeds(&run(&["--method", "diloco", "--h", "1", "--outer", "dn", "--dn-c", "0.1"]));
}

#[test]
fn unused_method_keys_in_a_config_file_are_not_refused() {
    // A config may hold several methods' settings (configs/README.md): only flags are checked.
    let tmp = tempdir();
    let cfg = config(tmp.path(), "\n[methods.diloco]\nh = 1\nouter = \"dn\"\ndn_c = 0.1\n");
    succeeds(&train(tmp.path(), &cfg, &["--method", "diloco", "--workers", "2", "--runtime", "sim", "--dn-c", "0.2"]));
    let cfg = config(tmp.path(), "\n[methods.diloco]\nh = 1\nouter = \"sgd\"\nouter_momentum = 0.5\n");
    let o = train(tmp.path(), &cfg, &["--method", "diloco", "--workers", "2", "--runtime", "sim", "--force"]);
    succeeds(&o);
    assert_one_error(
        train(tmp.path(), &cfg, &["--method", "diloco", "--workers", "2", "--outer-momentum", "0.3"]),
        &["--outer-momentum would be ignored", "[methods.diloco] outer = \"sgd\" has no momentum"],
    );
}

#[test]
fn link_with_a_cluster_profile_is_refused_before_the_old_run_is_replaced() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let cluster = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/clusters/tcp-4x1-10g.toml");
    let cluster = cluster.display().to_string();
    let sim = ["--method", "ddp", "--runtime", "sim", "--cluster", &cluster];
    succeeds(&train(tmp.path(), &cfg, &sim));
    let before = snapshot(&tmp.path().join("run"));
    assert_one_error(
        train(tmp.path(), &cfg, &[&sim[..], &["--link", "1mbit", "--force"]].concat()),
        &["--link (parallel.link) sets one flat link", "has its own links", "use one or the other"],
    );
    assert_eq!(snapshot(&tmp.path().join("run")), before, "the refused run touched the old one");
    // The same pair from a config file is refused too: the profile's links would be lost either way.
    let both = config(
        tmp.path(),
        &format!("\n[parallel]\nmethod = \"ddp\"\nruntime = \"sim\"\ncluster = {cluster:?}\nlink = \"1mbit\"\n"),
    );
    assert_one_error(train(tmp.path(), &both, &["--force"]), &["sets one flat link", "use one or the other"]);
}

#[test]
fn compare_gives_fixed_micro_batches_to_the_methods_that_take_it() {
    let tmp = tempdir();
    let cfg = config(tmp.path(), "");
    let results = tmp.path().join("cmp").display().to_string();
    let compare = |methods: &str| {
        lowcomm_in(
            tmp.path(),
            &[
                "compare",
                "--methods",
                methods,
                "--config",
                &cfg,
                "--workers",
                "2",
                "--runtime",
                "sim",
                "--steps",
                "1",
                "--fixed-micro-batches",
                "1",
                "--results",
                &results,
                "--quiet",
            ],
        )
    };
    assert_one_error(
        compare("ddp,zero1"),
        &["--fixed-micro-batches applies to none of ddp, zero1", "a setting of dpu, acco-wp, acco"],
    );
    succeeds(&compare("ddp,acco"));
}
