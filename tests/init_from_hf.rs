//! `--init-from-hf` (import::hf): a run exported with `export --hf` comes
//! back bit for bit, on one worker and on every worker of a data-parallel
//! run; a directory of another shape or vocabulary is refused with one line
//! naming the field and the flag that fixes it.

mod common;

use common::*;
use lowcomm::model::Arch;
use lowcomm::train::parallel::setup;
use lowcomm::train::trainer::Trainer;
use std::path::{Path, PathBuf};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A tiny run trained for 2 steps, exported to `dir/hf`; its final weights.
fn exported(dir: &Path) -> (PathBuf, Vec<f32>) {
    let run = dir.join("pretrained");
    let mut cfg = tiny_config(corpus(), &run);
    cfg.train.steps = 2;
    lowcomm::train::run::run(cfg, &quiet()).unwrap();
    let ck = lowcomm::checkpoint::load(&run).unwrap();
    let hf = dir.join("hf");
    lowcomm::export::hf::export(&ck, &hf).unwrap();
    (hf, ck.params)
}

#[test]
fn an_exported_run_comes_back_bit_for_bit_on_one_and_on_every_worker() {
    let tmp = tempdir();
    let (hf, want) = exported(tmp.path());
    let mut cfg = tiny_config(corpus(), &tmp.path().join("warm"));
    cfg.train.init_from_hf = Some(hf);
    let warm = Trainer::new(cfg.clone(), None).unwrap();
    assert_eq!(bits(&warm.model.params), bits(&want));
    assert_eq!(warm.step, 0, "steps start fresh");

    cfg.parallel.method = Some("zero1".into());
    cfg.parallel.workers = Some(2);
    cfg.parallel.runtime = "sim".into();
    let s = setup(cfg, &quiet()).unwrap();
    for rank in 0..2 {
        assert_eq!(bits(&s.worker(rank).unwrap().model.params), bits(&want), "worker {rank}");
    }
}

#[test]
fn another_shape_vocabulary_or_both_sources_are_refused_in_one_line() {
    let tmp = tempdir();
    let (hf, _) = exported(tmp.path());
    let mut cfg = tiny_config(corpus(), &tmp.path().join("other"));
    cfg.model.n_layer = Some(1);
    cfg.train.init_from_hf = Some(hf.clone());
    let e = chain(&Trainer::new(cfg.clone(), None).err().expect("a shape mismatch is refused"));
    assert_mentions(&e, &["--init-from-hf", "n_layer is 2 there, 1 in this run", "pass --n-layer 2"]);
    assert!(!e.contains('\n'), "{e}");

    cfg.model.n_layer = Some(2);
    cfg.train.init_from = Some(hf);
    let e = chain(&Trainer::new(cfg.clone(), None).err().expect("two starting points are refused"));
    assert_mentions(&e, &["train.init_from (--init-from) and train.init_from_hf (--init-from-hf) are both set"]);

    // transformers' tiny GPT-2 has a 64-token vocabulary; the corpus 512.
    cfg.train.init_from = None;
    cfg.train.init_from_hf = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf-gpt2-tiny"));
    let e = chain(&Trainer::new(cfg, None).err().expect("a vocabulary mismatch is refused"));
    assert_mentions(&e, &["vocab_size is 64", "512 tokens", "data prepare --tokenizer"]);
}

/// Through the command line, llama blocks with grouped-query attention:
/// `train`, `export --hf` (LlamaForCausalLM), then a data-parallel run
/// `--init-from-hf` that export starts from its bits on every worker, and a
/// gpt2 run refused in one line naming `--arch llama`.
#[test]
fn a_llama_run_exported_through_the_cli_starts_a_data_parallel_run_and_a_gpt2_run_is_refused() {
    let tmp = tempdir();
    let config = tiny_toml_file(tmp.path());
    let dir = |name: &str| tmp.path().join(name).display().to_string();
    let llama = ["--config", &config, "--arch", "llama", "--n-kv-head", "1", "--quiet"];
    let ok = |args: &[&str]| {
        let o = lowcomm_in(tmp.path(), args);
        assert!(o.status.success(), "{args:?}: {}", stderr_text(&o));
    };
    ok(&[&["train"], &llama[..], &["--steps", "2", "--out", &dir("pretrained")]].concat());
    ok(&["export", "--ckpt", &dir("pretrained"), "--hf", &dir("hf")]);
    let hf_config = std::fs::read_to_string(tmp.path().join("hf/config.json")).unwrap();
    assert!(hf_config.contains("LlamaForCausalLM") && hf_config.contains("\"num_key_value_heads\": 1"), "{hf_config}");
    let want = lowcomm::checkpoint::load(&tmp.path().join("pretrained")).unwrap().params;

    // The same flags as a configuration: every worker holds the export's bits.
    let mut cfg = tiny_config(corpus(), &tmp.path().join("warm-lib"));
    (cfg.model.arch, cfg.model.n_kv_head) = (Some(Arch::Llama), Some(1));
    cfg.train.init_from_hf = Some(tmp.path().join("hf"));
    (cfg.parallel.method, cfg.parallel.workers, cfg.parallel.runtime) = (Some("zero1".into()), Some(2), "sim".into());
    let s = setup(cfg, &quiet()).unwrap();
    for rank in 0..2 {
        assert_eq!(bits(&s.worker(rank).unwrap().model.params), bits(&want), "worker {rank}");
    }
    let warm =
        ["--init-from-hf", &dir("hf"), "--method", "zero1", "--workers", "2", "--runtime", "sim", "--steps", "2"];
    ok(&[&["train"], &llama[..], &warm[..], &["--out", &dir("warm")]].concat());

    let gpt2 =
        lowcomm_in(tmp.path(), &["train", "--config", &config, "--init-from-hf", &dir("hf"), "--out", &dir("gpt2")]);
    assert_one_error(gpt2, &["--init-from-hf", "arch is llama there, gpt2 in this run", "--arch llama"]);
}
