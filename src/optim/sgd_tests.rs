//! Hand-computed cases share p0 = [1, -2, 0.5], g1 = [0.1, -0.2, 0.3],
//! g2 = [0.2, 0.1, -0.4] and lr = 0.1.

use super::*;
use crate::optim::tests::{assert_close, check_look_ahead};

const P0: [f32; 3] = [1.0, -2.0, 0.5];
const G1: [f32; 3] = [0.1, -0.2, 0.3];
const G2: [f32; 3] = [0.2, 0.1, -0.4];

/// Two steps from P0 with G1, G2 at lr 0.1; returns params after each step.
fn two_steps(cfg: SgdConfig, decay: &DecaySegments) -> (Vec<f32>, Vec<f32>, Sgd) {
    cfg.validate().unwrap();
    let mut opt = Sgd::new(cfg, 3);
    let mut p = P0.to_vec();
    opt.step(&mut p, &G1, 0.1, decay);
    let after1 = p.clone();
    opt.step(&mut p, &G2, 0.1, decay);
    (after1, p, opt)
}

/// p1 = p0 - 0.1 g1 = [0.99, -1.98, 0.47]; p2 = p1 - 0.1 g2 = [0.97, -1.99, 0.51].
#[test]
fn plain_sgd_matches_hand_computed() {
    let (p1, p2, opt) = two_steps(SgdConfig::default(), &DecaySegments::all(3));
    assert_close(&p1, &[0.99, -1.98, 0.47], 1e-6);
    assert_close(&p2, &[0.97, -1.99, 0.51], 1e-6);
    assert_eq!((opt.state_len(), opt.state_tensors().len()), (0, 0));
}

/// mu = 0.9. Step 1: buf = g1, p1 = [0.99, -1.98, 0.47].
/// Step 2: buf = 0.9 g1 + g2 = [0.09+0.2, -0.18+0.1, 0.27-0.4] = [0.29, -0.08, -0.13];
/// p2 = p1 - 0.1 buf = [0.961, -1.972, 0.483].
#[test]
fn momentum_matches_hand_computed() {
    let (p1, p2, opt) = two_steps(SgdConfig { momentum: 0.9, ..SgdConfig::default() }, &DecaySegments::none());
    assert_close(&p1, &[0.99, -1.98, 0.47], 1e-6);
    assert_close(&p2, &[0.961, -1.972, 0.483], 1e-6);
    assert_close(&opt.momentum_buffer, &[0.29, -0.08, -0.13], 1e-7);
}

/// mu = 0.9, dampening 0.5: the first step still sets buf = g1 (undampened).
/// Step 2: buf = 0.9 g1 + 0.5 g2 = [0.09+0.1, -0.18+0.05, 0.27-0.2] = [0.19, -0.13, 0.07];
/// p2 = [0.99-0.019, -1.98+0.013, 0.47-0.007] = [0.971, -1.967, 0.463].
#[test]
fn dampened_momentum_matches_hand_computed() {
    let cfg = SgdConfig { momentum: 0.9, dampening: 0.5, ..SgdConfig::default() };
    let (p1, p2, _) = two_steps(cfg, &DecaySegments::none());
    assert_close(&p1, &[0.99, -1.98, 0.47], 1e-6);
    assert_close(&p2, &[0.971, -1.967, 0.463], 1e-6);
}

/// Nesterov, mu = 0.9. Step 1: buf = g1, d = g1 + 0.9 g1 = 1.9 g1 = [0.19, -0.38, 0.57];
/// p1 = [0.981, -1.962, 0.443]. Step 2: buf = [0.29, -0.08, -0.13] (as above),
/// d = g2 + 0.9 buf = [0.2+0.261, 0.1-0.072, -0.4-0.117] = [0.461, 0.028, -0.517];
/// p2 = [0.981-0.0461, -1.962-0.0028, 0.443+0.0517] = [0.9349, -1.9648, 0.4947].
#[test]
fn nesterov_matches_hand_computed() {
    let cfg = SgdConfig { momentum: 0.9, nesterov: true, ..SgdConfig::default() };
    let (p1, p2, _) = two_steps(cfg, &DecaySegments::none());
    assert_close(&p1, &[0.981, -1.962, 0.443], 1e-6);
    assert_close(&p2, &[0.9349, -1.9648, 0.4947], 1e-6);
}

/// wd = 0.1 on elements 0 and 2 only. Plain SGD, step 1:
/// g' = g1 + 0.1 p0 where decayed = [0.1+0.1, -0.2, 0.3+0.05] = [0.2, -0.2, 0.35];
/// p1 = [0.98, -1.98, 0.465].
#[test]
fn weight_decay_is_coupled_and_only_on_segments() {
    let cfg = SgdConfig { weight_decay: 0.1, ..SgdConfig::default() };
    let (p1, _, _) = two_steps(cfg, &DecaySegments::new([0..1, 2..3]));
    assert_close(&p1, &[0.98, -1.98, 0.465], 1e-6);
}

/// wd = 0.1 (elements 0, 2) with mu = 0.9: the decay enters the buffer.
/// Step 1 as above: buf = [0.2, -0.2, 0.35], p1 = [0.98, -1.98, 0.465].
/// Step 2: g' = [0.2+0.098, 0.1, -0.4+0.0465] = [0.298, 0.1, -0.3535];
/// buf = 0.9 buf + g' = [0.18+0.298, -0.18+0.1, 0.315-0.3535] = [0.478, -0.08, -0.0385];
/// p2 = [0.98-0.0478, -1.98+0.008, 0.465+0.00385] = [0.9322, -1.972, 0.46885].
#[test]
fn weight_decay_with_momentum_matches_hand_computed() {
    let cfg = SgdConfig { momentum: 0.9, weight_decay: 0.1, ..SgdConfig::default() };
    let (_, p2, opt) = two_steps(cfg, &DecaySegments::new([0..1, 2..3]));
    assert_close(&opt.momentum_buffer, &[0.478, -0.08, -0.0385], 1e-6);
    assert_close(&p2, &[0.9322, -1.972, 0.46885], 1e-6);
}

#[test]
fn sgd_look_ahead_commits_no_state() {
    for cfg in [
        SgdConfig { weight_decay: 0.1, ..SgdConfig::default() },
        SgdConfig { momentum: 0.9, dampening: 0.1, weight_decay: 0.1, ..SgdConfig::default() },
        SgdConfig { momentum: 0.9, nesterov: true, weight_decay: 0.1, ..SgdConfig::default() },
    ] {
        check_look_ahead(&mut Sgd::new(cfg, 7));
    }
}

/// The first-step rule (buf = g') must also hold for a look-ahead from a
/// fresh optimizer: p0 - 0.1 * 1.9 g1 for Nesterov.
#[test]
fn nesterov_look_ahead_from_fresh_state_uses_first_step_rule() {
    let opt = Sgd::new(SgdConfig { momentum: 0.9, nesterov: true, ..SgdConfig::default() }, 3);
    let mut out = [0.0; 3];
    opt.look_ahead(&P0, &G1, 0.1, &DecaySegments::none(), &mut out);
    assert_close(&out, &[0.981, -1.962, 0.443], 1e-6);
}

#[test]
fn sgd_sharded_step_equals_full_step() {
    let n = 9;
    let cfg = SgdConfig { momentum: 0.9, nesterov: true, weight_decay: 0.05, ..SgdConfig::default() };
    let decay = DecaySegments::new([1..4, 6..8]);
    let mut full = Sgd::new(cfg.clone(), n);
    let (mut a, mut b) = (Sgd::new(cfg.clone(), 4), Sgd::new(cfg, n - 4));
    let mut p_full: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 * 0.3).collect();
    let mut p_shard = p_full.clone();
    for s in 0..3 {
        let g: Vec<f32> = (0..n).map(|i| ((i * 5 + s) as f32).cos()).collect();
        full.step(&mut p_full, &g, 0.1, &decay);
        let (lo, hi) = p_shard.split_at_mut(4);
        a.step(lo, &g[..4], 0.1, &decay.restrict(0, 4));
        b.step(hi, &g[4..], 0.1, &decay.restrict(4, n));
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&p_shard), bits(&p_full));
}

#[test]
fn sgd_validate_rejects_bad_configs() {
    for bad in [
        SgdConfig { nesterov: true, ..SgdConfig::default() },
        SgdConfig { nesterov: true, momentum: 0.9, dampening: 0.1, ..SgdConfig::default() },
        SgdConfig { momentum: -0.5, ..SgdConfig::default() },
        SgdConfig { dampening: 1.5, ..SgdConfig::default() },
        SgdConfig { weight_decay: -0.1, ..SgdConfig::default() },
    ] {
        assert!(bad.validate().is_err(), "accepted {bad:?}");
    }
    let err = SgdConfig { nesterov: true, ..SgdConfig::default() }.validate().unwrap_err();
    assert!(err.to_string().contains("nesterov requires momentum > 0"), "{err}");
}

#[test]
fn sgd_momentum_state_round_trips() {
    let (_, _, opt) = two_steps(SgdConfig { momentum: 0.9, ..SgdConfig::default() }, &DecaySegments::none());
    let tensors: Vec<(String, Vec<f32>)> = opt.state_tensors().into_iter().map(|(n, t)| (n, t.to_vec())).collect();
    assert_eq!(tensors[0].0, "momentum_buffer");
    let mut fresh = Sgd::new(opt.config().clone(), 3);
    fresh.load_state(opt.steps_taken(), &tensors).unwrap();
    assert_eq!((fresh.steps_taken(), &fresh.momentum_buffer), (2, &opt.momentum_buffer));
    let mut plain = Sgd::new(SgdConfig::default(), 3);
    assert!(plain.load_state(1, &tensors).unwrap_err().to_string().contains("unknown state tensor"));
}
