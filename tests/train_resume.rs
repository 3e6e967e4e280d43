//! Training on the fixture end to end: the loss falls, metrics are logged as
//! documented, resume is bit-identical, and a crash mid-save is harmless.

mod common;

use common::*;
use lowcomm::checkpoint;
use lowcomm::train::{run, RunOptions, Trainer};
use std::fs;

#[test]
fn loss_falls_on_the_fixture() {
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    // 60 steps leave the tiny model on the unigram plateau (~5.2 nats,
    // barely under ln(512) - 1); 160 steps of 8 windows get well below it.
    const STEPS: u64 = 160;
    const BATCH: u64 = 8;
    let mut cfg = tiny_config(corpus(), &run_dir);
    cfg.train.steps = STEPS;
    cfg.train.batch_size = BATCH as usize;
    cfg.train.eval_every = 80;
    cfg.schedule.max_lr = 3e-3;
    cfg.schedule.warmup_steps = 10;
    let summary = run(cfg, &quiet()).unwrap();
    assert_eq!(summary.steps, STEPS);
    assert_eq!(summary.tokens, STEPS * BATCH * CTX as u64);

    let metrics = read_metrics(&run_dir);
    let train = records(&metrics, "train");
    let eval = records(&metrics, "eval");
    // log_every = 1: one train line per step, in order.
    let steps: Vec<u64> = train.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=STEPS).collect::<Vec<_>>());
    for r in &train {
        for field in ["step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "wall_s"] {
            assert!(r[field].is_number(), "train line lacks numeric {field}: {r}");
        }
        assert_eq!(r["tokens"].as_u64().unwrap(), r["step"].as_u64().unwrap() * BATCH * CTX as u64, "{r}");
        assert!(r["grad_norm"].as_f64().unwrap() > 0.0, "{r}");
    }
    // Eval at step 80 (eval_every) and at the end.
    let eval_steps: Vec<u64> = eval.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(eval_steps, [80, STEPS]);
    for r in &eval {
        for field in ["step", "tokens", "val_loss", "val_ppl", "wall_s"] {
            assert!(r[field].is_number(), "eval line lacks numeric {field}: {r}");
        }
        let (loss, ppl) = (r["val_loss"].as_f64().unwrap(), r["val_ppl"].as_f64().unwrap());
        assert!((ppl - loss.exp()).abs() <= 1e-3 * ppl, "val_ppl {ppl} is not exp(val_loss {loss})");
    }

    let uniform = (VOCAB as f32).ln();
    let initial = train[0]["loss"].as_f64().unwrap() as f32;
    eprintln!("initial loss {initial}, final train loss {}, val loss {}", summary.final_loss, summary.eval.val_loss);
    // An untrained model predicts close to uniformly.
    assert!((initial - uniform).abs() < 0.5, "initial loss {initial}, ln(vocab) {uniform}");
    let last_train = train.last().unwrap()["loss"].as_f64().unwrap() as f32;
    assert_eq!(last_train, summary.final_loss);
    assert!(summary.final_loss < initial - 1.0, "training loss {} did not fall from {initial}", summary.final_loss);
    let val = summary.eval.val_loss;
    assert!(val.is_finite() && val < uniform - 1.0 && val < initial - 1.0, "val loss {val} vs initial {initial}");
    assert_eq!(eval.last().unwrap()["val_loss"].as_f64().unwrap() as f32, val);
    // The learning rate followed warmup then decay.
    let lr: Vec<f64> = train.iter().map(|r| r["lr"].as_f64().unwrap()).collect();
    assert!(lr[0] < lr[5] && lr[STEPS as usize - 1] < lr[10], "lr schedule not applied: {lr:?}");
    // The run directory has its config and a loadable final checkpoint.
    assert!(run_dir.join("config.toml").is_file());
    let ck = checkpoint::load(&run_dir).unwrap();
    assert_eq!(ck.state.step, STEPS);
    assert_eq!(summary.checkpoint, checkpoint::checkpoints_dir(&run_dir).join(format!("step-{STEPS:06}")));
}

/// Config that makes every piece of RNG state matter.
fn resume_config(out: &std::path::Path, steps: u64) -> lowcomm::train::RunConfig {
    let mut cfg = tiny_config(corpus(), out);
    cfg.train.steps = steps;
    cfg.train.grad_accum = 2;
    cfg.model.dropout = Some(0.1);
    cfg.validate().unwrap();
    cfg
}

#[test]
fn resume_is_bit_identical() {
    const N: u64 = 8;
    let tmp = tempdir();
    let (dir_a, dir_b) = (tmp.path().join("a"), tmp.path().join("b"));

    let a = run(resume_config(&dir_a, 2 * N), &quiet()).unwrap();
    assert_eq!(a.steps, 2 * N);

    let first =
        run(resume_config(&dir_b, 2 * N), &RunOptions { stop_at: Some(N), quiet: true, ..Default::default() }).unwrap();
    assert_eq!(first.steps, N);
    assert_eq!(checkpoint::load(&dir_b).unwrap().state.step, N);
    let b = run(
        resume_config(&dir_b, 2 * N),
        &RunOptions { resume: Some(dir_b.clone()), quiet: true, ..Default::default() },
    )
    .unwrap();
    assert_eq!(b.steps, 2 * N);
    assert_eq!((a.tokens, a.final_loss.to_bits()), (b.tokens, b.final_loss.to_bits()));
    assert_eq!(a.eval.val_loss.to_bits(), b.eval.val_loss.to_bits());

    let (ca, cb) = (checkpoint::load(&dir_a).unwrap(), checkpoint::load(&dir_b).unwrap());
    assert_eq!((ca.state.step, cb.state.step), (2 * N, 2 * N));
    assert_eq!(ca.state.tokens_seen, cb.state.tokens_seen);
    assert_eq!(ca.state.optimizer_steps, cb.state.optimizer_steps);
    assert_eq!(ca.state.sampler, cb.state.sampler);
    assert_eq!(ca.state.dropout_rng, cb.state.dropout_rng);
    assert_eq!(ca.params.len(), cb.params.len());
    let diff = ca.params.iter().zip(&cb.params).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
    assert_eq!(diff, 0, "{diff} of {} parameters differ after resume", ca.params.len());
    assert!(!ca.optimizer.is_empty(), "AdamW has state tensors");
    assert_eq!(ca.optimizer.len(), cb.optimizer.len());
    for ((na, ta), (nb, tb)) in ca.optimizer.iter().zip(&cb.optimizer) {
        assert_eq!(na, nb);
        let bits = |t: &[f32]| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(ta) == bits(tb), "optimizer tensor {na} differs after resume");
    }
    // Sanity: dropout really was on (a run without it ends elsewhere).
    let c_dir = tmp.path().join("c");
    let mut no_dropout = resume_config(&c_dir, 2 * N);
    no_dropout.model.dropout = Some(0.0);
    run(no_dropout, &quiet()).unwrap();
    assert_ne!(checkpoint::load(&c_dir).unwrap().params, ca.params);

    // Run B's log has each step exactly once, with the same numbers as A's.
    let (ma, mb) = (read_metrics(&dir_a), read_metrics(&dir_b));
    let steps_b: Vec<u64> = records(&mb, "train").iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps_b, (1..=2 * N).collect::<Vec<_>>());
    for (ra, rb) in records(&ma, "train").iter().zip(records(&mb, "train")) {
        for field in ["step", "tokens", "loss", "lr", "grad_norm"] {
            assert_eq!(ra[field], rb[field], "{field} differs: {ra} vs {rb}");
        }
    }
    let eval_b: Vec<u64> = records(&mb, "eval").iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(eval_b, [N, 2 * N]);
    // Wall time is cumulative across the two halves.
    let wall: Vec<f64> = records(&mb, "train").iter().map(|r| r["wall_s"].as_f64().unwrap()).collect();
    assert!(wall.windows(2).all(|w| w[0] <= w[1]), "wall_s goes backwards on resume: {wall:?}");
}

#[test]
fn killed_mid_write_leaves_previous_checkpoint_loadable() {
    const N: u64 = 4;
    let tmp = tempdir();
    let run_dir = tmp.path().join("run");
    let mut cfg = tiny_config(corpus(), &run_dir);
    cfg.train.steps = 2 * N;
    run(cfg.clone(), &RunOptions { stop_at: Some(N), quiet: true, ..Default::default() }).unwrap();
    let before = snapshot(&checkpoint::checkpoints_dir(&run_dir));

    // A writer killed while saving step N+1: half a model file, no state.json.
    let ckdir = checkpoint::checkpoints_dir(&run_dir);
    let torn = ckdir.join(format!("step-{:06}.tmp-999", N + 1));
    fs::create_dir(&torn).unwrap();
    fs::write(torn.join("model.safetensors"), b"\x08\x01\x00\x00\x00\x00\x00\x00{\"h.0.attn").unwrap();
    assert_eq!(
        checkpoint_entries(&run_dir),
        ["latest".to_string(), format!("step-{N:06}"), format!("step-{:06}.tmp-999", N + 1)]
    );

    let ck = checkpoint::load(&run_dir).unwrap();
    assert_eq!(ck.state.step, N);
    assert!(ck.params.iter().all(|p| p.is_finite()));
    let tr = Trainer::new(cfg.clone(), Some(&run_dir)).unwrap();
    assert_eq!(tr.step, N);
    drop(tr);
    // Loading touched nothing.
    let mut after = snapshot(&ckdir);
    after.retain(|p, _| !p.starts_with(torn.file_name().unwrap()));
    assert_eq!(before, after);

    let summary = run(cfg, &RunOptions { resume: Some(run_dir.clone()), quiet: true, ..Default::default() }).unwrap();
    assert_eq!(summary.steps, 2 * N);
    assert!(!torn.exists(), "the next save should prune the crashed writer's temp dir");
    let entries = checkpoint_entries(&run_dir);
    assert!(entries.iter().all(|e| !e.contains(".tmp-")), "{entries:?}");
    assert_eq!(entries, ["latest".to_string(), format!("step-{N:06}"), format!("step-{:06}", 2 * N)]);
    assert_eq!(checkpoint::load(&run_dir).unwrap().state.step, 2 * N);
    let steps: Vec<u64> =
        records(&read_metrics(&run_dir), "train").iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=2 * N).collect::<Vec<_>>());

    // A crash after the rename but before `latest` moved: `latest` still
    // names the older checkpoint, and that one loads.
    let ck_n = ckdir.join(format!("step-{N:06}"));
    assert!(ck_n.is_dir());
    fs::write(ckdir.join("latest"), format!("step-{N:06}")).unwrap();
    assert_eq!(checkpoint::load(&run_dir).unwrap().state.step, N);
}
