//! Tests of the run configuration (config.rs): defaults, unknown keys, overrides, validation.

use super::*;

#[test]
fn empty_config_gives_nano_defaults() {
    let c = RunConfig::from_toml("").unwrap();
    let m = c.validate().unwrap();
    assert_eq!(m, GptConfig::nano());
    assert_eq!(c.data_dir(&m), PathBuf::from("data/gutenberg-2048"));
}

#[test]
fn unknown_key_is_rejected_with_its_name() {
    let e = RunConfig::from_toml("[train]\nstepz = 3\n").unwrap_err().to_string();
    assert!(e.contains("stepz") && e.starts_with("line 2 (`stepz = 3`):") && !e.contains("\n"), "{e}");
    let e = RunConfig::from_toml("[modle]\n").unwrap_err().to_string();
    assert!(e.contains("modle"), "{e}");
}

#[test]
fn overrides_apply_on_top_of_the_preset() {
    let c =
        RunConfig::from_toml("[model]\npreset = \"micro\"\nn_layer = 2\n[optimizer]\nkind = \"sgd\"\nmomentum = 0.9\n")
            .unwrap();
    let m = c.validate().unwrap();
    assert_eq!((m.n_layer, m.n_embd), (2, 256));
    let back = RunConfig::from_toml(&c.to_toml()).unwrap();
    assert_eq!(back.validate().unwrap(), m);
}

#[test]
fn shipped_configs_parse_and_validate() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            RunConfig::from_file(&p).and_then(|c| c.validate()).unwrap_or_else(|e| panic!("{}: {e:#}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn saved_floats_are_what_the_user_wrote_and_read_back_bit_identical() {
    let text = "[model]\ndropout = 0.1\n[train]\ngrad_clip = 0.7\n[schedule]\nmax_lr = 3e-3\nmin_lr_ratio = 0.01\n\
                [optimizer]\nkind = \"adamw\"\nbeta2 = 0.999\neps = 1e-8\nweight_decay = 0.05\n";
    let c = RunConfig::from_toml(text).unwrap();
    let saved = c.to_toml();
    for line in ["dropout = 0.1\n", "grad_clip = 0.7\n", "max_lr = 0.003\n", "min_lr_ratio = 0.01\n", "beta2 = 0.999\n"]
    {
        assert!(saved.contains(line), "{line:?} not in\n{saved}");
    }
    let back = RunConfig::from_toml(&saved).unwrap();
    assert_eq!(back.schedule.max_lr.to_bits(), c.schedule.max_lr.to_bits());
    assert_eq!(back.optimizer, c.optimizer);
    let sgd = RunConfig::from_toml("[optimizer]\nkind = \"sgd\"\nmomentum = 0.9\ndampening = 0.3\n").unwrap();
    let saved = sgd.to_toml();
    assert!(saved.contains("momentum = 0.9\n") && saved.contains("dampening = 0.3\n"), "{saved}");
    assert_eq!(RunConfig::from_toml(&saved).unwrap().optimizer, sgd.optimizer);
    // Any f32 survives the trip, not only round decimals.
    let mut x = 1.234_567e-7f32;
    for _ in 0..2000 {
        let mut c = RunConfig::default();
        c.schedule.max_lr = x;
        let back = RunConfig::from_toml(&c.to_toml()).unwrap();
        assert_eq!(back.schedule.max_lr.to_bits(), x.to_bits(), "{x:e}");
        x = f32::from_bits(x.to_bits().wrapping_mul(2_654_435_761) % 0x7f00_0000);
    }
}

/// configs/README.md: `[optimizer]` keys are all optional, `kind`
/// defaulting to adamw ("missing field `kind`" before).
#[test]
fn optimizer_section_without_kind_is_adamw() {
    let c = RunConfig::from_toml("[optimizer]\nweight_decay = 0.0\n").unwrap();
    let want = crate::optim::AdamWConfig { weight_decay: 0.0, ..Default::default() };
    assert_eq!(c.optimizer, OptimizerConfig::AdamW(want));
    assert_eq!(RunConfig::from_toml("[optimizer]\n").unwrap().optimizer, OptimizerConfig::default());
    let e = RunConfig::from_toml("[optimizer]\nkind = \"adam\"\n").unwrap_err().to_string();
    assert!(e.contains("unknown variant `adam`"), "{e}");
}

#[test]
fn values_that_would_fake_results_are_refused() {
    let refused = |text: &str, says: &str| {
        let e = RunConfig::from_toml(text).unwrap().validate().unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    };
    // 0 windows reported val_loss 0, a perfect model.
    refused("[train]\neval_windows = 0\n", "train.eval_windows must be at least 1 (got 0)");
    // 0 kept one checkpoint anyway.
    refused("[train]\nkeep_checkpoints = 0\n", "train.keep_checkpoints must be at least 1");
    // <= 0 made virtual time stand still.
    for bad in ["-1", "0", "-1e9", "nan", "inf"] {
        refused(
            &format!("[parallel]\nmicro_batch_s = {bad}\n"),
            "parallel.micro_batch_s must be a number of seconds > 0",
        );
    }
    RunConfig::from_toml("[parallel]\nmicro_batch_s = 0.01\n").unwrap().validate().unwrap();
}

#[test]
fn bad_values_name_the_field() {
    let e = RunConfig::from_toml("[train]\nseq_len = 999\n").unwrap().validate().unwrap_err().to_string();
    assert!(e.contains("train.seq_len"), "{e}");
}
