use super::*;
use crate::optim::tests::{assert_close, check_look_ahead};

fn cfg() -> AdamWConfig {
    AdamWConfig { beta1: 0.9, beta2: 0.95, eps: 1e-8, weight_decay: 0.1 }
}

/// lr = 0.01, wd = 0.1, elements 0 and 2 decayed, element 1 not (a "bias").
/// p0 = [1, -2, 0.5]; g1 = [0.1, -0.2, 0.3]; g2 = [0.2, 0.1, -0.4].
///
/// Step 1 (t = 1): 1 - b1 = 0.1, 1 - b2 = 0.05, so m = 0.1 g, v = 0.05 g^2,
/// m_hat = g, v_hat = g^2 and the update is lr * g / (|g| + 1e-8) ~ 0.01 sign(g):
///   p0 = 1 * (1 - 0.001) - 0.01 * 0.1/0.10000001  = 0.999 - 0.009999999 = 0.989000001
///   p1 = -2 (no decay)   + 0.01 * 0.2/0.20000001  = -1.990000001 (rounded; f32: -1.99)
///   p2 = 0.5 * 0.999     - 0.01 * 0.3/0.30000001  = 0.4995 - 0.01     = 0.489500000
/// Step 2 (t = 2): bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.9025 = 0.0975.
///   e0: m = 0.9*0.01 + 0.1*0.2 = 0.029; v = 0.95*0.0005 + 0.05*0.04 = 0.002475
///       m_hat = 0.029/0.19 = 0.152631579; v_hat = 0.002475/0.0975 = 0.025384615
///       upd = 0.01 * 0.152631579 / 0.159325501 = 0.009579858
///       p0 = 0.989000001 * 0.999 - 0.009579858 = 0.988011001 - 0.009579858 = 0.978431143
///   e1: m = 0.9*(-0.02) + 0.1*0.1 = -0.008; v = 0.95*0.002 + 0.05*0.01 = 0.0024
///       m_hat = -0.042105263; v_hat = 0.024615385; sqrt = 0.156892908
///       upd = -0.002683694; p1 = -1.990000001 + 0.002683694 = -1.987316306
///   e2: m = 0.9*0.03 + 0.1*(-0.4) = -0.013; v = 0.95*0.0045 + 0.05*0.16 = 0.012275
///       m_hat = -0.068421053; v_hat = 0.125897436; sqrt = 0.354820287
///       upd = -0.001928330; p2 = 0.4895 * 0.999 + 0.001928330 = 0.490938830
#[test]
fn adamw_matches_hand_computed_two_steps() {
    let mut opt = AdamW::new(cfg(), 3);
    let decay = DecaySegments::new([0..1, 2..3]);
    let mut p = vec![1.0, -2.0, 0.5];
    opt.step(&mut p, &[0.1, -0.2, 0.3], 0.01, &decay);
    assert_close(&p, &[0.989000001, -1.990000001, 0.4895], 1e-6);
    assert_close(&opt.exp_avg, &[0.01, -0.02, 0.03], 1e-8);
    assert_close(&opt.exp_avg_sq, &[0.0005, 0.002, 0.0045], 1e-8);
    opt.step(&mut p, &[0.2, 0.1, -0.4], 0.01, &decay);
    assert_close(&p, &[0.978431143, -1.987316306, 0.490938830], 1e-6);
    assert_close(&opt.exp_avg, &[0.029, -0.008, -0.013], 1e-8);
    assert_close(&opt.exp_avg_sq, &[0.002475, 0.0024, 0.012275], 1e-8);
    assert_eq!(opt.steps_taken(), 2);
}

/// With g = 0 and fresh moments the Adam term is 0, so only the decoupled
/// decay acts: p = 2 * (1 - 0.5 * 0.1) = 1.9 where decayed, 2 elsewhere.
#[test]
fn adamw_decay_is_decoupled_and_only_on_segments() {
    let mut opt = AdamW::new(cfg(), 4);
    let mut p = vec![2.0; 4];
    opt.step(&mut p, &[0.0; 4], 0.5, &DecaySegments::new(std::iter::once(1..3)));
    assert_eq!(p, vec![2.0, 1.9, 1.9, 2.0]);
}

#[test]
fn adamw_look_ahead_commits_no_state() {
    check_look_ahead(&mut AdamW::new(cfg(), 7));
}

#[test]
fn adamw_sharded_step_equals_full_step() {
    let n = 10;
    let decay = DecaySegments::new([0..3, 4..8]);
    let mut full = AdamW::new(cfg(), n);
    let (mut lo_opt, mut hi_opt) = (AdamW::new(cfg(), n / 2), AdamW::new(cfg(), n / 2));
    let (d_lo, d_hi) = (decay.restrict(0, n / 2), decay.restrict(n / 2, n));
    let mut p_full: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 1.0).collect();
    let mut p_shard = p_full.clone();
    for s in 0..3 {
        let g: Vec<f32> = (0..n).map(|i| ((i * 3 + s) as f32).sin()).collect();
        full.step(&mut p_full, &g, 0.02, &decay);
        let (p_lo, p_hi) = p_shard.split_at_mut(n / 2);
        lo_opt.step(p_lo, &g[..n / 2], 0.02, &d_lo);
        hi_opt.step(p_hi, &g[n / 2..], 0.02, &d_hi);
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&p_shard), bits(&p_full));
    assert_eq!(bits(&[lo_opt.exp_avg_sq.clone(), hi_opt.exp_avg_sq.clone()].concat()), bits(&full.exp_avg_sq));
}

/// A vector spanning several chunks, with decay segments crossing chunk
/// boundaries, gives bitwise the result of a plain sequential loop.
#[test]
fn adamw_chunked_step_equals_sequential_loop() {
    let n = 2 * CHUNK + 123;
    let decay = DecaySegments::new([10..CHUNK + 5, 2 * CHUNK - 1..2 * CHUNK + 7]);
    let mut opt = AdamW::new(cfg(), n);
    let mut p: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).cos()).collect();
    let mut want = p.clone();
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    for t in 1..=2u64 {
        let g: Vec<f32> = (0..n).map(|i| ((i as u64 * 7 + t) as f32 * 0.01).sin()).collect();
        opt.step(&mut p, &g, 0.01, &decay);
        let c = Coefs::new(&cfg(), 0.01, t);
        for i in 0..n {
            (want[i], m[i], v[i]) = c.update(want[i], g[i], m[i], v[i], c.mul_for(decay.contains(i)));
        }
    }
    assert!(p == want && opt.exp_avg == m && opt.exp_avg_sq == v);
}

#[test]
fn adamw_validate_rejects_bad_hyper_parameters() {
    assert!(cfg().validate().is_ok());
    for bad in [
        AdamWConfig { beta1: 1.0, ..cfg() },
        AdamWConfig { beta2: -0.1, ..cfg() },
        AdamWConfig { eps: 0.0, ..cfg() },
        AdamWConfig { weight_decay: -1.0, ..cfg() },
    ] {
        assert!(bad.validate().is_err(), "accepted {bad:?}");
    }
}
