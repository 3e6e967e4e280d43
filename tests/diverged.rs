//! A data-parallel run that diverges stops at once with a clear error and a
//! non-zero exit, keeps its last finite checkpoint, and no command loads a
//! checkpoint holding non-finite parameters.

mod common;

use common::*;
use std::fs;
use std::path::Path;

fn text(o: &std::process::Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr_text(o))
}

/// The checkpoint `latest` points at, under RUN/checkpoints.
fn latest(run: &Path) -> std::path::PathBuf {
    let ckpts = run.join("checkpoints");
    ckpts.join(fs::read_to_string(ckpts.join("latest")).unwrap().trim())
}

#[test]
fn a_run_at_lr_1e30_exits_non_zero_keeps_a_finite_checkpoint_and_eval_refuses_a_nan_one() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let run = tmp.path().join("run");
    let args = [
        "train",
        "--config",
        &config,
        "--method",
        "ddp",
        "--workers",
        "2",
        "--runtime",
        "sim",
        "--quiet",
        "--steps",
        "10",
        "--checkpoint-every",
        "1",
        "--lr",
        "1e30",
    ];
    let o = lowcomm_in(tmp.path(), &args);
    assert!(!o.status.success(), "a diverged run must fail:\n{}", text(&o));
    let said = text(&o);
    assert!(said.contains("training diverged: participant") && said.contains("--lr"), "{said}");
    // Warm-up makes step 1 finite (huge), step 2 is not: step 1's checkpoint is the last.
    let kept = latest(&run);
    let state: serde_json::Value = serde_json::from_str(&fs::read_to_string(kept.join("state.json")).unwrap()).unwrap();
    assert!(state["step"].as_u64().unwrap() < 10, "{state}");
    let ok = lowcomm_in(tmp.path(), &["eval", "--ckpt", run.to_str().unwrap()]);
    assert!(ok.status.success(), "the kept checkpoint loads:\n{}", text(&ok));

    // A checkpoint with a NaN parameter (as older versions wrote), its hash
    // updated so that only the value is wrong: eval and export refuse it.
    let model = kept.join("model.safetensors");
    let old_sha = lowcomm::util::sha256_file(&model).unwrap();
    let mut tensors = lowcomm::checkpoint::read_f32_tensors(&model).unwrap();
    tensors[0].2[3] = f32::NAN;
    let named: Vec<(&str, Vec<usize>, &[f32])> =
        tensors.iter().map(|(n, s, d)| (n.as_str(), s.clone(), &d[..])).collect();
    lowcomm::checkpoint::write_f32_tensors(&model, &named).unwrap();
    let state_text = fs::read_to_string(kept.join("state.json")).unwrap();
    let new_sha = lowcomm::util::sha256_file(&model).unwrap();
    fs::write(kept.join("state.json"), state_text.replace(&old_sha, &new_sha)).unwrap();
    for cmd in [&["eval", "--ckpt"][..], &["generate", "--tokens", "4", "--ckpt"]] {
        let o = lowcomm_in(tmp.path(), &[cmd, &[run.to_str().unwrap()]].concat());
        let said = text(&o);
        assert!(!o.status.success(), "{cmd:?} must refuse a NaN checkpoint:\n{said}");
        assert!(said.contains("holds a non-finite parameter") && said.contains("[3] = NaN"), "{said}");
    }
}
