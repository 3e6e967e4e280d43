//! Tests of the shared pieces (DecaySegments, config, state loading) and
//! helpers used by the per-optimizer tests.

use super::*;

/// Asserts each element of `got` is within `tol` of `want`.
pub(crate) fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((f64::from(g) - w).abs() <= tol, "element {i}: got {g:.9}, want {w:.9}");
    }
}

/// Owned copy of an optimizer's state, for before/after comparison.
pub(crate) fn snapshot(opt: &dyn Optimizer) -> (u64, Vec<(String, Vec<f32>)>) {
    let tensors = opt.state_tensors().into_iter().map(|(n, t)| (n, t.to_vec())).collect();
    (opt.steps_taken(), tensors)
}

/// Steps `opt` twice (so momentum-like state is non-trivial) and then
/// checks that a look-ahead yields bitwise the parameters the next step
/// produces, and that the look-ahead changed no state.
pub(crate) fn check_look_ahead(opt: &mut dyn Optimizer) {
    let n = 7;
    let decay = DecaySegments::new([1..3, 5..6]);
    let mut params: Vec<f32> = (0..n).map(|i| 0.3 * i as f32 - 1.0).collect();
    for s in 0..2 {
        let g: Vec<f32> = (0..n).map(|i| ((i + s) as f32 * 0.7).sin()).collect();
        opt.step(&mut params, &g, 0.05, &decay);
    }
    let grads: Vec<f32> = (0..n).map(|i| (i as f32 * 1.3).cos()).collect();
    let before = snapshot(opt);
    let mut out = vec![f32::NAN; n];
    opt.look_ahead(&params, &grads, 0.05, &decay, &mut out);
    assert_eq!(snapshot(opt), before, "look_ahead changed the optimizer state");
    assert_ne!(out, params, "look_ahead did not move the parameters");
    opt.step(&mut params, &grads, 0.05, &decay);
    assert_eq!(
        out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        params.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

#[test]
fn decay_segments_normalise_and_contain() {
    let d = DecaySegments::new([5..8, 0..2, 1..3, 9..9, 8..10]);
    assert_eq!(d.ranges(), &[0..3, 5..10]);
    let inside: Vec<usize> = (0..12).filter(|&i| d.contains(i)).collect();
    assert_eq!(inside, vec![0, 1, 2, 5, 6, 7, 8, 9]);
    assert!(!DecaySegments::none().contains(0));
    assert!(DecaySegments::all(4).contains(3) && !DecaySegments::all(4).contains(4));
}

#[test]
fn decay_segments_restrict_rebases_to_shard() {
    let d = DecaySegments::new([0..3, 5..8, 10..12]);
    assert_eq!(d.restrict(2, 9).ranges(), &[0..1, 3..6]);
    assert_eq!(d.restrict(8, 10).ranges(), &[] as &[std::ops::Range<usize>]);
    assert_eq!(d.restrict(6, 20).ranges(), &[0..2, 4..6]);
}

#[test]
fn decay_spans_cover_chunk_in_order() {
    let d = DecaySegments::new([0..3, 5..8, 10..12]);
    let mut spans = Vec::new();
    d.for_each_span(2, 9, |r, dec| spans.push((r, dec)));
    // Absolute [2,11) re-based to 2: 2 decayed, 3..5 not, 5..8 decayed, 8..10 not, 10 decayed.
    assert_eq!(spans, vec![(0..1, true), (1..3, false), (3..6, true), (6..8, false), (8..9, true)]);
    spans.clear();
    DecaySegments::none().for_each_span(4, 3, |r, dec| spans.push((r, dec)));
    assert_eq!(spans, vec![(0..3, false)]);
}

#[test]
fn config_default_is_adamw_and_json_round_trips() {
    assert_eq!(OptimizerConfig::default(), OptimizerConfig::AdamW(AdamWConfig::default()));
    let c: OptimizerConfig = serde_json::from_str(r#"{"kind":"sgd","momentum":0.9,"nesterov":true}"#).unwrap();
    let OptimizerConfig::Sgd(s) = &c else { panic!("expected sgd, got {c:?}") };
    assert_eq!((s.momentum, s.nesterov, s.dampening, s.weight_decay), (0.9, true, 0.0, 0.0));
    let back: OptimizerConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    let a: OptimizerConfig = serde_json::from_str(r#"{"kind":"adamw","beta2":0.999}"#).unwrap();
    assert_eq!(a, OptimizerConfig::AdamW(AdamWConfig { beta2: 0.999, ..AdamWConfig::default() }));
}

#[test]
fn config_rejects_unknown_keys_and_kinds() {
    for bad in [
        r#"{"kind":"adamw","betta2":0.95}"#,
        r#"{"kind":"sgd","momentum":0.9,"lr":0.1}"#,
        r#"{"kind":"adam"}"#,
        r#"{"beta1":0.9,"momentum":0.9}"#,
    ] {
        assert!(serde_json::from_str::<OptimizerConfig>(bad).is_err(), "accepted {bad}");
    }
}

/// configs/README.md: every key is optional, `kind` defaulting to adamw (a
/// section without `kind` was refused with "missing field `kind`").
#[test]
fn optimizer_kind_defaults_to_adamw() {
    let c: OptimizerConfig = serde_json::from_str(r#"{"weight_decay":0.0}"#).unwrap();
    assert_eq!(c, OptimizerConfig::AdamW(AdamWConfig { weight_decay: 0.0, ..AdamWConfig::default() }));
    let empty: OptimizerConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, OptimizerConfig::default());
    let e = serde_json::from_str::<OptimizerConfig>(r#"{"momentum":0.9}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `momentum`"), "{e}");
}

#[test]
fn build_validates_config() {
    let bad = OptimizerConfig::Sgd(SgdConfig { nesterov: true, ..SgdConfig::default() });
    let err = bad.try_build(4).err().expect("nesterov without momentum accepted");
    assert!(format!("{err:#}").contains("nesterov"), "{err:#}");
    let opt = OptimizerConfig::default().build(4);
    assert_eq!((opt.steps_taken(), opt.state_len()), (0, 8));
}

#[test]
fn load_state_round_trips_and_rejects_bad_tensors() {
    let mut a = OptimizerConfig::default().build(3);
    let mut p = vec![1.0, 2.0, 3.0];
    a.step(&mut p, &[0.1, -0.2, 0.3], 0.01, &DecaySegments::all(3));
    let (steps, tensors) = snapshot(a.as_ref());
    let mut b = OptimizerConfig::default().build(3);
    b.load_state(steps, &tensors).unwrap();
    assert_eq!(snapshot(b.as_ref()), (steps, tensors.clone()));

    let mut c = OptimizerConfig::default().build(3);
    let fresh = snapshot(c.as_ref());
    let renamed = vec![("exp_avg".to_string(), vec![0.0; 3]), ("m".to_string(), vec![0.0; 3])];
    let short = vec![("exp_avg".to_string(), vec![0.0; 3]), ("exp_avg_sq".to_string(), vec![0.0; 2])];
    let missing = vec![("exp_avg".to_string(), vec![1.0; 3])];
    let twice = vec![tensors[0].clone(), tensors[0].clone(), tensors[1].clone()];
    for (bad, needle) in [(renamed, "unknown"), (short, "2 elements"), (missing, "missing"), (twice, "2 times")] {
        let err = c.load_state(5, &bad).unwrap_err().to_string();
        assert!(err.contains(needle), "error {err:?} lacks {needle:?}");
        assert_eq!(snapshot(c.as_ref()), fresh, "failed load changed state");
    }
}
