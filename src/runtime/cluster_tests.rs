//! Tests of the cluster profile (cluster.rs): parsing, errors that name the field, the shipped profiles, the simulator spec.

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs()
}

/// A one-node profile with `extra` TOML appended.
fn profile(extra: &str) -> Result<ClusterProfile> {
    ClusterProfile::from_toml(&format!("name = \"t\"\nnodes = 1\nworkers_per_node = 2\n{extra}"))
}

const DEV: &str = "[device]\npeak_flops = 1e12\nutilization = 0.5\n[links]\nintra = \"1GB/s\"\n";

#[test]
fn micro_batch_time_from_flops_by_hand() {
    // 6e9 FLOP/token x 1000 tokens / (1e12 x 0.5 FLOP/s) = 12 s.
    let p = profile(&format!("{DEV}[timing]\nflops_per_token = 6e9\ntokens_per_micro_batch = 1000\n")).unwrap();
    assert!(close(p.micro_batch_s(&GptConfig::nano(), 7).unwrap(), 12.0));
    // Without [timing], the trained model's FLOPs and micro-batch tokens.
    let own = profile(DEV).unwrap();
    let nano = GptConfig::nano();
    assert!(close(own.micro_batch_s(&nano, 1000).unwrap(), nano.flops_per_token() * 1000.0 / 5e11));
}

#[test]
fn work_rates_come_from_the_device_and_default_to_the_flop_model() {
    let rates =
        DEV.replace("utilization = 0.5\n", "utilization = 0.5\nmemory_bandwidth = 2e9\nsustained_flops = 3e9\n");
    let spec = profile(&rates).unwrap().sim_spec(&GptConfig::nano(), 1000, 64, vec![1.0; 2]).unwrap();
    assert_eq!((spec.memory_bytes_per_s, spec.flops_per_s), (Some(2e9), Some(3e9)));
    // Without them: memory-bound work free, FLOPs at peak x utilization = 5e11.
    assert_eq!(profile(DEV).unwrap().work_rates(), (None, Some(5e11)));
    let e = profile(&DEV.replace("utilization = 0.5\n", "utilization = 0.5\nmemory_bandwidth = 0\n")).unwrap_err();
    assert!(e.to_string().starts_with("device.memory_bandwidth must be > 0, got 0"), "{e}");
}

#[test]
fn overlap_factors_reach_the_simulator_and_must_be_at_least_one() {
    let with = DEV.replace(
        "utilization = 0.5\n",
        "utilization = 0.5\noverlap_compute_factor = 1.25\noverlap_comm_factor = 1.5\n",
    );
    let spec = profile(&with).unwrap().sim_spec(&GptConfig::nano(), 1000, 64, vec![1.0; 2]).unwrap();
    assert_eq!(spec.interference, Interference { compute: 1.25, comm: 1.5, beside: 1.0 });
    let none = profile(DEV).unwrap().sim_spec(&GptConfig::nano(), 1000, 64, vec![1.0; 2]).unwrap();
    assert_eq!(none.interference, Interference::NONE);
    let e = profile(&DEV.replace("utilization = 0.5\n", "utilization = 0.5\noverlap_comm_factor = 0.9\n")).unwrap_err();
    assert!(e.to_string().starts_with("device.overlap_comm_factor must be >= 1"), "{e}");
}

#[test]
fn fixed_seconds_override_the_flop_model_and_the_device() {
    let p = profile("[links]\nintra = \"1GB/s\"\n[timing]\nseconds_per_micro_batch = 0.25\n").unwrap();
    assert_eq!(p.micro_batch_s(&GptConfig::nano(), 1000).unwrap(), 0.25);
}

#[test]
fn comm_scale_is_timing_params_over_trained_params() {
    let p = profile(&format!("{DEV}[timing]\nparams = 125e6\n")).unwrap();
    assert_eq!(p.comm_scale(500_000).unwrap(), 250.0);
    assert_eq!(profile(DEV).unwrap().comm_scale(500_000).unwrap(), 1.0);
}

#[test]
fn sim_spec_checks_speeds_and_keeps_the_shape() {
    let p = profile(&format!("wire = \"bf16\"\n{DEV}")).unwrap();
    let nano = GptConfig::nano();
    let e = p.sim_spec(&nano, 1000, 64, vec![1.0; 3]).unwrap_err().to_string();
    assert_eq!(e, "--speeds has 3 values but the cluster has 2 workers; give one per worker, e.g. --speeds 1,0.25");
    let e = p.sim_spec(&nano, 1000, 64, vec![1.0, 0.0]).unwrap_err().to_string();
    assert!(e.contains("--speeds value 2 (worker 1) is 0"), "{e}");
    let topo = p.sim_spec(&nano, 1000, 64, vec![1.0; 2]).unwrap().topology;
    assert_eq!((topo.workers, topo.per_node, topo.server), (2, 2, false));
    assert_eq!(p.wire, Some(WireDtype::Bf16));
}

#[test]
fn shipped_profiles_parse_and_time_nano() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/clusters");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let p = ClusterProfile::from_file(&path).unwrap();
            let spec = p.sim_spec(&GptConfig::nano(), 700_000, 16 * 64, vec![1.0; p.workers()]).unwrap();
            assert!(spec.micro_batch_s > 0.0 && spec.comm_scale > 0.0, "{}", path.display());
            // Round-trips, so a run can save the profile it used.
            assert_eq!(ClusterProfile::from_toml(&toml::to_string(&p).unwrap()).unwrap(), p);
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    for want in ["nvlink-1x8.toml", "a100-4x8-100g.toml", "tcp-16x8-80g.toml"] {
        assert!(names.iter().any(|n| n == want), "missing {want} in {names:?}");
    }
    // The paper's cluster under GPT-Neo-125M: 7.5e8 x 24576 / (312e12 x 0.4) s.
    let a100 = ClusterProfile::from_file(dir.join("a100-4x8-100g.toml")).unwrap();
    assert_eq!(a100.workers(), 32);
    assert!(close(a100.micro_batch_s(&GptConfig::nano(), 1).unwrap(), 7.5e8 * 24576.0 / 1.248e14));
    assert!(a100.link_model().unwrap().inter.is_some());
}

#[test]
fn bad_input_errors_name_the_field() {
    let e = |t: &str| ClusterProfile::from_toml(t).unwrap_err().to_string();
    let two = "name = \"t\"\nnodes = 2\nworkers_per_node = 2\n[device]\npeak_flops = 1e12\nutilization = 0.5\n";
    assert!(e(&format!("{two}[links]\nintra = \"1GB/s\"\n")).starts_with("links.inter is required when nodes > 1"));
    let bad = e(&format!("{two}[links]\nintra = \"1GB/s\"\ninter = \"fast\"\n"));
    assert!(bad.starts_with("links.inter: cannot parse link \"fast\"") && bad.contains("expected e.g."), "{bad}");
    assert!(e(&format!("{two}[links]\nintra = \"0gbit,3us\"\ninter = \"1gbit\"\n"))
        .starts_with("links.intra: cannot parse link \"0gbit,3us\": bandwidth must be positive"));
    let sweep = "[links.inter_sweep]\nmembers = 2\nall_reduce = [[4, 1e-3]]\n";
    assert!(e(&format!("{two}[links]\nintra = \"1GB/s\"\ninter = \"1gbit\"\n{sweep}"))
        .starts_with("links.inter_sweep: all_reduce needs 2 to 16"));
    let lone =
        profile(&format!("[links]\nintra = \"1GB/s\"\n{}", sweep.replace("[[4, 1e-3]]", "[[4, 1e-3], [8, 2e-3]]")));
    assert!(lone.unwrap_err().to_string().starts_with("links.inter_sweep is given without links.inter"));
    let unknown = e(&format!("{two}[links]\nintra = \"1GB/s\"\ninter = \"1gbit\"\nlatency = 3\n"));
    assert!(
        unknown.starts_with("line 10 (`latency = 3`):") && unknown.contains("latency") && !unknown.contains('\n'),
        "{unknown}"
    );
    let links = "[links]\nintra = \"1GB/s\"\ninter = \"1gbit\"\n";
    assert!(e(&format!("{}{links}", two.replace("1e12", "0")))
        .starts_with("device.peak_flops must be > 0, got 0 (e.g. 312e12"));
    assert!(e(&format!("{}{links}", two.replace("0.5", "1.5"))).starts_with("device.utilization must be in (0, 1]"));
    assert!(e(&format!("{}memory = 0\n{links}", two)).starts_with("device.memory must be > 0, got 0 (e.g. 80e9"));
    assert!(e("name = \"t\"\nnodes = 0\nworkers_per_node = 8\n[links]\nintra = \"1GB/s\"\n")
        .starts_with("nodes must be at least 1"));
    assert!(profile("[links]\nintra = \"1GB/s\"\n")
        .unwrap_err()
        .to_string()
        .starts_with("device: missing [device] section"));
    assert!(profile(&format!("{DEV}[timing]\ntokens_per_micro_batch = 0\n"))
        .unwrap_err()
        .to_string()
        .starts_with("timing.tokens_per_micro_batch"));
    for cv in ["-0.1", "0.6", "nan"] {
        let err = profile(&format!("{DEV}[timing]\nmicro_batch_cv = {cv}\n")).unwrap_err().to_string();
        assert!(err.starts_with("timing.micro_batch_cv must be in [0, 0.5]"), "{cv}: {err}");
    }
    for r in ["-0.1", "0.96", "nan"] {
        let err = profile(&format!("{DEV}[timing]\nmicro_batch_correlation = {r}\n")).unwrap_err().to_string();
        assert!(err.starts_with("timing.micro_batch_correlation must be in [0, 0.95]"), "{r}: {err}");
    }
}

#[test]
fn a_micro_batch_spread_reaches_the_simulator_and_defaults_to_none() {
    let spec =
        |extra: &str| profile(&format!("{DEV}{extra}")).unwrap().sim_spec(&GptConfig::nano(), 1000, 1024, vec![1.0; 2]);
    assert_eq!(spec("[timing]\nmicro_batch_cv = 0.04\n").unwrap().micro_batch_cv, 0.04);
    assert_eq!(spec("").unwrap().micro_batch_cv, 0.0);
    assert_eq!(spec("[timing]\nmicro_batch_correlation = 0.6\n").unwrap().micro_batch_correlation, 0.6);
    assert_eq!(spec("").unwrap().micro_batch_correlation, 0.0);
}

#[test]
fn file_errors_start_with_the_path() {
    let path = std::env::temp_dir().join(format!("lowcomm-cluster-{}.toml", std::process::id()));
    std::fs::write(&path, "name = \"t\"\nnodes = 2\nworkers_per_node = 8\n[device]\npeak_flops = 1e12\nutilization = 0.5\n[links]\nintra = \"1GB/s\"\ninter = \"fast\"\n").unwrap();
    let e = ClusterProfile::from_file(&path).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(e.starts_with(&format!("{}: links.inter: cannot parse link \"fast\"", path.display())), "{e}");
}

#[test]
fn a_profiles_warning_comments_are_read_back_without_their_prefix() {
    let text = "name = \"x\"\n# a comment\n# WARNING: this host's speed moved (+6%).\n  # WARNING:  a second one \nnodes = 1 # WARNING: not a comment line\n";
    assert_eq!(warnings(text), vec!["this host's speed moved (+6%).", "a second one"]);
    assert!(warnings("name = \"x\"\n").is_empty());
    // Said once per file a process reads, however often it reads it.
    let path = Path::new("/nonexistent/lowcomm-warned-once.toml");
    assert!(first_warning_of(path));
    assert!(!first_warning_of(path) && !first_warning_of(path));
    assert!(first_warning_of(Path::new("/nonexistent/another.toml")));
}
