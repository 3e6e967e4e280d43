//! Outer optimizers by hand: each formula on numbers exact in f32.

use super::*;

fn cfg(kind: OuterKind, lr: f32, momentum: f32) -> OuterConfig {
    OuterConfig { kind, lr, momentum, ..OuterConfig::default() }
}

fn dn(lr: f32, momentum: f32, n: u64, c: f32) -> OuterConfig {
    OuterConfig { kind: OuterKind::Dn, lr, momentum, dn_buffer: n, dn_c: c }
}

/// Runs `cfg` from `theta` over the pseudo-gradients `gs`; every iterate.
fn trace(cfg: OuterConfig, theta: &[f32], gs: &[&[f32]]) -> Vec<Vec<f32>> {
    let mut opt = OuterOpt::new(cfg, theta.len());
    let mut x = theta.to_vec();
    gs.iter()
        .map(|g| {
            opt.step(&mut x, g);
            x.clone()
        })
        .collect()
}

#[test]
fn sgd_and_sgd_momentum_by_hand() {
    // sgd, eps 0.5: 3 - 0.5 * 2 = 2, then 2 - 0.5 * (-4) = 4.
    assert_eq!(trace(cfg(OuterKind::Sgd, 0.5, 0.9), &[3.0], &[&[2.0], &[-4.0]]), [[2.0], [4.0]]);
    // sgd-momentum, eps 0.5, beta 0.5: m = 2, x = 3 - 1 = 2; m = 1 + 4 = 5, x = 2 - 2.5 = -0.5.
    assert_eq!(trace(cfg(OuterKind::SgdMomentum, 0.5, 0.5), &[3.0], &[&[2.0], &[4.0]]), [[2.0], [-0.5]]);
    // nesterov, eq. 4, eps 0.5, beta 0.5: m_1 = 2, x = 3 - 0.5 (0.25 * 0 + 1.5 * 2) = 1.5;
    // m_2 = 1 + 4 = 5, x = 1.5 - 0.5 (0.25 * 2 + 1.5 * 4) = 1.5 - 3.25 = -1.75.
    assert_eq!(trace(cfg(OuterKind::Nesterov, 0.5, 0.5), &[3.0], &[&[2.0], &[4.0]]), [[1.5], [-1.75]]);
}

#[test]
fn delayed_nesterov_with_a_buffer_of_one_is_nesterov() {
    // N = 1: every step is a momentum step with (1 - c + c) beta = beta, for any c in [0, 1].
    let gs: Vec<Vec<f32>> = (0..6).map(|t| vec![0.3 * t as f32 - 0.7, 1.1 / (t + 1) as f32, -0.05]).collect();
    let gs: Vec<&[f32]> = gs.iter().map(|g| &g[..]).collect();
    let theta = [0.5, -2.0, 1.25];
    let nesterov = trace(cfg(OuterKind::Nesterov, 0.7, 0.9), &theta, &gs);
    for c in [0.0, 0.5, 1.0] {
        assert_eq!(trace(dn(0.7, 0.9, 1, c), &theta, &gs), nesterov, "c = {c}");
    }
    // ... and differs from it with a longer buffer.
    assert_ne!(trace(dn(0.7, 0.9, 2, 0.0), &theta, &gs), nesterov);
}

#[test]
fn delayed_nesterov_follows_algorithm_3_by_hand() {
    // N = 2, beta 0.5, eps 1, theta_0 = 10, g = 4, 8, 2, 6.
    // c = 0.25 (in [0, 1/2]):
    // t=0 (1 % 2 != 0): Delta = 4, m = 0,               theta = 10 - (0.25*0.5*0 + 4/2)      = 8
    // t=1 (2 % 2 == 0): Delta = 12, m = 0.5*0 + 12/2 = 6, theta = 8 - ((1 - 0.5 + 0.25)*0.5*6 + 8/2) = 8 - 6.25 = 1.75, Delta = 0
    // t=2:              Delta = 2,                      theta = 1.75 - (0.25*0.5*6 + 2/2)    = 0
    // t=3:              Delta = 8, m = 0.5*6 + 8/2 = 7,   theta = 0 - (0.75*0.5*7 + 6/2)       = -5.625
    let gs: [&[f32]; 4] = [&[4.0], &[8.0], &[2.0], &[6.0]];
    assert_eq!(trace(dn(1.0, 0.5, 2, 0.25), &[10.0], &gs), [[8.0], [1.75], [0.0], [-5.625]]);
    // c = 0 (the default): plain gradient steps between momentum steps:
    // 10 - 2 = 8; m = 6, 8 - (0.5*6 + 4) = 1; 1 - 1 = 0; m = 7, 0 - (0.5*7 + 3) = -6.5.
    assert_eq!(trace(dn(1.0, 0.5, 2, 0.0), &[10.0], &gs), [[8.0], [1.0], [0.0], [-6.5]]);
    // The state after t = 3: m = 7, Delta = 0, t = 4.
    let mut opt = OuterOpt::new(dn(1.0, 0.5, 2, 0.25), 1);
    let mut x = [10.0];
    gs.iter().for_each(|g| opt.step(&mut x, g));
    assert_eq!(opt.state_tensors(), [("m", &[7.0f32][..]), ("delta", &[0.0][..])]);
    assert_eq!(opt.steps_taken(), 4);
}

#[test]
fn four_identical_pseudo_gradients_with_nesterov_match_eq_5() {
    // Eq. 5: from (theta_t, m_t), four sequential Nesterov steps with the same g give
    // m = beta^4 m_t + (1 + beta + beta^2 + beta^3) g,
    // theta = theta_t - eps ((4 + 4 beta + 3 beta^2 + 2 beta^3 + beta^4) g + beta^2 (1 + beta + beta^2 + beta^3) m_t).
    let (beta, eps, g, m_t, theta_t) = (0.5f64, 0.25f64, 1.0f64, 2.0f64, 3.0f64);
    let s = 1.0 + beta + beta.powi(2) + beta.powi(3);
    let m_want = beta.powi(4) * m_t + s * g;
    let theta_want = theta_t
        - eps
            * ((4.0 + 4.0 * beta + 3.0 * beta.powi(2) + 2.0 * beta.powi(3) + beta.powi(4)) * g
                + beta.powi(2) * s * m_t);
    // By hand: m = 0.125 + 1.875 = 2; theta = 3 - 0.25 (7.0625 + 0.9375) = 1.
    assert_eq!((m_want, theta_want), (2.0, 1.0));
    let mut opt = OuterOpt::new(cfg(OuterKind::Nesterov, eps as f32, beta as f32), 1);
    opt.load_state(7, |_| Ok(vec![m_t as f32])).unwrap();
    let mut x = [theta_t as f32];
    for _ in 0..4 {
        opt.step(&mut x, &[g as f32]);
    }
    assert_eq!(x, [theta_want as f32]);
    assert_eq!(opt.state_tensors(), [("m", &[m_want as f32][..])]);
    assert_eq!(opt.steps_taken(), 11);
}

#[test]
fn state_round_trips_and_refuses_the_wrong_size() {
    let c = dn(0.7, 0.9, 3, 0.1);
    let mut a = OuterOpt::new(c, 2);
    let mut x = [1.0, 2.0];
    for g in [[0.5, -0.25], [0.125, 1.0]] {
        a.step(&mut x, &g);
    }
    let saved: Vec<(String, Vec<f32>)> = a.state_tensors().iter().map(|(n, t)| (n.to_string(), t.to_vec())).collect();
    let get = |name: &str| Ok(saved.iter().find(|(n, _)| n == name).unwrap().1.clone());
    let mut b = OuterOpt::new(c, 2);
    b.load_state(a.steps_taken(), get).unwrap();
    let (mut xa, mut xb) = (x, x);
    a.step(&mut xa, &[0.5, 0.5]);
    b.step(&mut xb, &[0.5, 0.5]);
    assert_eq!(xa, xb);
    assert_eq!(b.state_len(), 4);
    assert_eq!(OuterOpt::new(cfg(OuterKind::Sgd, 1.0, 0.0), 2).state_len(), 0);
    let e = OuterOpt::new(c, 3).load_state(0, get).unwrap_err().to_string();
    assert!(e.contains("outer m has 2 values, the model 3"), "{e}");
}

#[test]
fn bad_settings_name_the_key_and_an_example() {
    let ok = OuterConfig::default();
    assert_eq!((ok.kind, ok.lr, ok.momentum, ok.dn_c), (OuterKind::Nesterov, 0.7, 0.9, 0.0));
    ok.validate("diloco").unwrap();
    for (c, needles) in [
        (OuterConfig { lr: 0.0, ..ok }, &["[methods.diloco]: outer_lr must be > 0", "outer_lr = 0.7"][..]),
        (OuterConfig { momentum: 1.0, ..ok }, &["outer_momentum must be in [0, 1)", "--outer-momentum 0.9"]),
        (OuterConfig { dn_buffer: 0, ..ok }, &["dn_buffer must be at least 1", "dn_buffer = 4"]),
        (OuterConfig { dn_buffer: 4, dn_c: 0.5, ..ok }, &["dn_c must be in [0, 1/N] = [0, 0.25]", "dn_c = 0"]),
        (OuterConfig { dn_c: -0.1, ..ok }, &["dn_c must be in [0, 1/N]"]),
    ] {
        let e = c.validate("diloco").unwrap_err().to_string();
        for n in needles {
            assert!(e.contains(n), "{e}");
        }
    }
    assert_eq!(
        OuterKind::NAMES.map(|n| n.to_string()),
        [OuterKind::Sgd, OuterKind::SgdMomentum, OuterKind::Nesterov, OuterKind::Dn].map(|k| k.name().to_string())
    );
}
