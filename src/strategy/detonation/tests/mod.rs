//! Steps 1-9 with numbers small enough to check by hand.

mod reference;
mod replicators;
mod runs;

use super::demo::DemoReplicator;
use super::random::RandomReplicator;
use super::replicator::{values_for, Exchange, Replicator};
use super::step::{sign, DemoStep, Inner};
use crate::comm::WireDtype;
use crate::optim::dct::{Dct, Piece};
use crate::optim::DecaySegments;
use crate::runtime::Group;
use crate::strategy::detonation::settings::DemoSettings;

/// One 1-D run of 4 (a bias of 4 with chunk 4): one chunk of 4 coefficients.
fn run4() -> Vec<Piece> {
    vec![Piece { offset: 0, rows: 1, cols: 4, h: 1, w: 4 }]
}

/// The gradient whose DCT is `c` (so tests can speak in coefficients).
fn from_coefficients(c: &[f32]) -> Vec<f32> {
    let dct = Dct::new(run4());
    let (mut g, mut z) = (vec![0.0; 4], vec![0.0; 4]);
    dct.inverse(c, &mut g, &mut z);
    g
}

fn near(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
}

fn top1(beta: f32) -> DemoSettings {
    DemoSettings { topk: Some(1), chunk: 4, beta, ..DemoSettings::default() }
}

/// Three members' payloads, gathered in member order.
fn gather(exs: Vec<Exchange>) -> (Vec<u8>, Vec<u8>) {
    let mut all = Vec::new();
    let mut mine = Vec::new();
    for (i, e) in exs.into_iter().enumerate() {
        let Exchange::Gather { input, .. } = e else { panic!("DeMo gathers") };
        if i == 0 {
            mine = input.clone();
        }
        all.extend(input);
    }
    (mine, all)
}

#[test]
fn one_demo_step_by_hand_with_the_mean_over_contributors() {
    // Three workers, lr 1, beta 0, top-1 of one chunk of 4. Their DCT(g):
    //   w0 [3, 0, 1, 0] -> sends (0, 3);  w1 [5, 1, 0, 0] -> (0, 5);  w2 [0, 0, -7, 1] -> (2, -7)
    // Decoded (step 7): index 0 was sent by two: mean (3 + 5) / 2 = 4, not / 3;
    // index 2 by one: -7. C~ = [4, 0, -7, 0].
    // Q = IDCT(C~): D[0][j] = 1/2, D[2][j] = cos(pi (2j+1) / 4) / sqrt 2 = [.5, -.5, -.5, .5]
    //   Q = 4 * 1/2 - 7 * D[2] = [-1.5, 5.5, 5.5, -1.5].
    let coefs = [[3.0, 0.0, 1.0, 0.0], [5.0, 1.0, 0.0, 0.0], [0.0, 0.0, -7.0, 1.0]];
    let mut reps: Vec<DemoReplicator> =
        (0..3).map(|_| DemoReplicator::new(&top1(0.0), &run4(), 4, Group::World, 3, WireDtype::F32)).collect();
    let exs: Vec<Exchange> = reps.iter_mut().zip(&coefs).map(|(r, c)| r.fold(0, 1.0, &from_coefficients(c))).collect();
    // Fixed payload: 1 pair of a u8 index (a chunk of 4) and an f32 value.
    assert!(exs.iter().all(|e| e.payload_bytes() == 5));
    let (input, output) = gather(exs);
    let mut q = vec![0.0; 4];
    reps[0].unfold(Exchange::Gather { group: Group::World, input, output }, &mut q);
    assert!(near(&q, &[-1.5, 5.5, 5.5, -1.5]), "{q:?}");
    // Steps 1, 8, 9 with lr 0.1, weight decay 0.5 on the first three elements:
    //   p * (1 - 0.05) on decayed ones, then - 0.1 * sign(Q) = -0.1 * [-1, 1, 1, -1].
    let mut step =
        DemoStep { weight_decay: 0.5, decay: DecaySegments::new(std::iter::once(0..3)), sign: true, inner: Inner::Sgd };
    let mut p = vec![1.0, 2.0, -1.0, 0.5];
    step.apply(0.1, &mut q, &mut p);
    assert!(near(&p, &[0.95 + 0.1, 1.9 - 0.1, -0.95 - 0.1, 0.5 + 0.1]), "{p:?}");
}

#[test]
fn what_is_sent_leaves_delta_and_the_rest_keeps_accumulating() {
    // DCT(g) = [3, 0, 1, 0], lr 1, beta 0.5, top-1.
    let mut r = DemoReplicator::new(&top1(0.5), &run4(), 4, Group::World, 2, WireDtype::F32);
    let g = from_coefficients(&[3.0, 0.0, 1.0, 0.0]);
    let ex = r.fold(0, 1.0, &g);
    // Coefficient 0 (3) was sent: it leaves; 1 stays.
    assert!(near(r.delta_dct(), &[0.0, 0.0, 1.0, 0.0]), "{:?}", r.delta_dct());
    assert_eq!(r.delta_dct()[0], 0.0, "exactly: the sent value is subtracted in coefficient space");
    let mut q = vec![0.0; 4];
    let Exchange::Gather { input, .. } = ex else { panic!() };
    let output = [input.clone(), input.clone()].concat();
    r.unfold(Exchange::Gather { group: Group::World, input, output }, &mut q);
    // Step 2 again: 0.5 * [0, 0, 1, 0] + [3, 0, 1, 0] = [3, 0, 1.5, 0]; 3 is sent again.
    r.fold(1, 1.0, &g);
    assert!(near(r.delta_dct(), &[0.0, 0.0, 1.5, 0.0]), "{:?}", r.delta_dct());
    // Step 2 with lr 2: 0.5 * 1.5 + 2 * 1 = 2.75 at index 2, 2 * 3 = 6 at index 0: 6 is sent.
    r.unfold(Exchange::Gather { group: Group::World, input: vec![0; 5], output: vec![0; 10] }, &mut q);
    r.fold(2, 2.0, &g);
    assert!(near(r.delta_dct(), &[0.0, 0.0, 2.75, 0.0]), "{:?}", r.delta_dct());
}

#[test]
fn weight_decay_is_really_applied() {
    // DeToNATION reads `self.weight_decay`, never set (detonatiomixin.py:95-96):
    // any non-zero decay raises there. Here step 1 decays, whatever step 9 is.
    // Q = 0 (nothing arrived): sign(0) = 0, so only step 1 moves p:
    // decayed elements become p * (1 - lr wd) = p * (1 - 0.1 * 0.5); the others stay.
    for inner in [Inner::Sgd, Inner::AdamW(super::adamw::DecoupledAdamW::new(&Default::default(), 3))] {
        let mut step =
            DemoStep { weight_decay: 0.5, decay: DecaySegments::new(std::iter::once(0..2)), sign: true, inner };
        let mut p = vec![2.0, -4.0, 8.0];
        step.apply(0.1, &mut [0.0; 3], &mut p);
        assert_eq!(p, vec![2.0 * 0.95, -4.0 * 0.95, 8.0]);
    }
}

#[test]
fn sign_is_ternary() {
    assert_eq!([sign(2.5), sign(-1e-30), sign(0.0), sign(-0.0)], [1.0, -1.0, 0.0, 0.0]);
}

#[test]
fn decoupled_adamw_takes_q_as_its_gradient() {
    // First AdamW step from zero moments: m_hat = Q, v_hat = Q^2, so the step
    // is lr * Q / (|Q| + eps) = lr * sign(Q) (to eps): 1 - 0.1 = 0.9, 1 + 0.1.
    let mut step = DemoStep {
        weight_decay: 0.0,
        decay: DecaySegments::none(),
        sign: false,
        inner: Inner::AdamW(super::adamw::DecoupledAdamW::new(&Default::default(), 2)),
    };
    let mut p = vec![1.0, 1.0];
    step.apply(0.1, &mut [3.0, -0.5], &mut p);
    assert!(near(&p, &[0.9, 1.1]), "{p:?}");
    assert_eq!(step.steps_taken(), 1);
}

#[test]
fn demo_payload_bytes_follow_the_formula() {
    // A 128 x 64 matrix with chunk 64: 2 blocks of 64 x 64 = 4096 coefficients
    // (u16 indices); topk 32, f32: 2 * 32 * (2 + 4) = 384 bytes; bf16: 2 * 32 * 4.
    let pieces = vec![Piece { offset: 0, rows: 128, cols: 64, h: 64, w: 64 }];
    let s = DemoSettings::default();
    let r = DemoReplicator::new(&s, &pieces, 128 * 64, Group::World, 2, WireDtype::F32);
    assert_eq!(r.budget().payload_bytes, 384);
    assert_eq!(r.budget().dense_bytes, 4 * 128 * 64);
    assert!((r.budget().compression() - 384.0 / 32768.0).abs() < 1e-12);
    let r = DemoReplicator::new(&s, &pieces, 128 * 64, Group::World, 2, WireDtype::Bf16);
    assert_eq!(r.budget().payload_bytes, 256);
    // compression 0.05 buys round(0.05 * 4 * 4096 / 6) = 137 pairs per chunk.
    let c = DemoSettings { compression: Some(0.05), ..s };
    let r = DemoReplicator::new(&c, &pieces, 128 * 64, Group::World, 2, WireDtype::F32);
    assert_eq!(r.budget().payload_bytes, 2 * 137 * 6);
    // Chunks of <= 256 coefficients travel with u8 indices: 16 x 16, top 4: 4 * 5.
    let small = vec![Piece { offset: 0, rows: 16, cols: 16, h: 16, w: 16 }];
    let r = DemoReplicator::new(
        &DemoSettings { topk: Some(4), ..DemoSettings::default() },
        &small,
        256,
        Group::World,
        2,
        WireDtype::F32,
    );
    assert_eq!(r.budget().payload_bytes, 20);
}

#[test]
fn random_members_draw_the_same_indices_without_sending_them() {
    // compression 0.1 of 50 f32 elements buys 5 values (and no index).
    assert_eq!(values_for(0.1, 50, WireDtype::F32), 5);
    assert_eq!(values_for(0.1, 50, WireDtype::Bf16), 10, "twice the values in bf16");
    let mut a = RandomReplicator::new(0.9, 5, 7, 50, Group::World, WireDtype::F32);
    let mut b = RandomReplicator::new(0.9, 5, 7, 50, Group::World, WireDtype::F32);
    let first = a.indices(3).to_vec();
    assert_eq!(first, b.indices(3).to_vec(), "same seed and step: same indices on every member");
    assert_eq!(first.len(), 5);
    assert!(first.windows(2).all(|w| w[0] < w[1]), "distinct, ascending: {first:?}");
    assert_ne!(first, a.indices(4).to_vec(), "another step draws another set");
    let ex = a.fold(3, 1.0, &[1.0; 50]);
    assert_eq!(ex.payload_bytes(), 5 * 4, "values only");
    // The sent elements left delta; the others hold lr g.
    let Exchange::Mean { values, .. } = ex else { panic!() };
    assert_eq!(values, vec![1.0; 5]);
    let mut q = vec![0.0; 50];
    a.unfold(Exchange::Mean { group: Group::World, values: vec![2.0; 5], wire: WireDtype::F32 }, &mut q);
    for (i, v) in q.iter().enumerate() {
        assert_eq!(*v, if first.contains(&i) { 2.0 } else { 0.0 });
    }
}
