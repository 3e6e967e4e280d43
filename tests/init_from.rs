//! `--init-from` (train::warm_start): a run starts from another run's model,
//! bit for bit, on one worker and on every worker of a data-parallel run;
//! optimizer and steps start fresh; a model of another shape is refused
//! with one error naming the difference.

mod common;

use common::*;
use lowcomm::train::parallel::setup;
use lowcomm::train::trainer::Trainer;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// A tiny run trained for 3 steps into `dir/pretrained`; its final weights.
fn pretrained(dir: &std::path::Path) -> (std::path::PathBuf, Vec<f32>) {
    let run = dir.join("pretrained");
    let mut cfg = tiny_config(corpus(), &run);
    cfg.train.steps = 3;
    lowcomm::train::run::run(cfg, &quiet()).unwrap();
    let params = lowcomm::checkpoint::load(&run).unwrap().params;
    (run, params)
}

#[test]
fn init_from_starts_one_worker_and_every_data_parallel_worker_from_the_runs_model() {
    let tmp = tempdir();
    let (from, want) = pretrained(tmp.path());
    let fresh = Trainer::new(tiny_config(corpus(), &tmp.path().join("fresh")), None).unwrap();
    assert_ne!(bits(&fresh.model.params), bits(&want), "the pretrained run moved its weights");

    let mut cfg = tiny_config(corpus(), &tmp.path().join("warm"));
    cfg.train.init_from = Some(from.clone());
    let warm = Trainer::new(cfg.clone(), None).unwrap();
    assert_eq!(bits(&warm.model.params), bits(&want));
    assert_eq!(warm.step, 0, "steps start fresh");

    cfg.parallel.method = Some("diloco".into());
    cfg.parallel.workers = Some(2);
    cfg.parallel.runtime = "sim".into();
    let s = setup(cfg, &quiet()).unwrap();
    assert_eq!(bits(&s.init.params), bits(&want));
    for rank in 0..2 {
        assert_eq!(bits(&s.worker(rank).unwrap().model.params), bits(&want), "worker {rank}");
    }
}

#[test]
fn init_from_a_model_of_another_shape_is_refused_naming_the_difference() {
    let tmp = tempdir();
    let (from, _) = pretrained(tmp.path());
    let mut cfg = tiny_config(corpus(), &tmp.path().join("other"));
    cfg.model.n_layer = Some(1);
    cfg.train.init_from = Some(from);
    let e = chain(&Trainer::new(cfg, None).err().expect("a shape mismatch is refused"));
    assert_mentions(&e, &["--init-from", "another shape", "n_layer"]);
}
