//! Striding's rows and offsets and DiLoCo's local steps, by hand; their
//! earlier readings (`striding-element`, `diloco-delta`) beside them.

use super::near;
use crate::comm::WireDtype;
use crate::optim::dct::Piece;
use crate::optim::DecaySegments;
use crate::runtime::Group;
use crate::strategy::detonation::diloco::DilocoReplicator;
use crate::strategy::detonation::diloco_delta::DilocoDeltaReplicator;
use crate::strategy::detonation::replicator::{Exchange, Replicator};
use crate::strategy::detonation::step::{DemoStep, Inner};
use crate::strategy::detonation::striding::{largest_divisor_at_most, RowView, StridingReplicator};
use crate::strategy::detonation::striding_element::StridingElementReplicator;

/// A 1-D piece of `len` at `offset` (striding uses only where and how long).
fn piece(offset: usize, len: usize) -> Piece {
    Piece { offset, rows: 1, cols: len, h: 1, w: len }
}

/// The rows of step `t` of `v`.
fn rows(v: &RowView, t: u64) -> Vec<usize> {
    (0..v.k).map(|j| v.row(t, j)).collect()
}

#[test]
fn striding_rows_by_hand() {
    // The reference's c: the largest divisor <= 64 (research notes' worked numbers).
    assert_eq!([16384, 50257, 65, 64, 20, 7].map(|n| largest_divisor_at_most(n, 64)), [64, 29, 13, 64, 20, 7]);
    // Two tensors, chunk 8, rate 0.5.
    //   20 elements: c = 5 rows of 4; k = floor(2.5) = 2 rows per step, stride ceil(5/2) = 3.
    //   7 elements (prime, <= 8): c = 7 rows of 1; k = floor(3.5) = 3, stride ceil(7/3) = 3.
    let mut r = StridingReplicator::new(0.0, 0.5, 8, &[piece(0, 20), piece(20, 7)], 27, Group::World, WireDtype::F32);
    let v = r.views().to_vec();
    assert_eq!(v[0], RowView { offset: 0, rows: 5, width: 4, k: 2, stride: 3 });
    assert_eq!(v[1], RowView { offset: 20, rows: 7, width: 1, k: 3, stride: 3 });
    // Offsets t mod 3; rows (o + 3 j) mod c.
    assert_eq!([0, 1, 2, 3].map(|t| rows(&v[0], t)), [[0, 3], [1, 4], [2, 0], [0, 3]]);
    assert_eq!([0, 1, 2].map(|t| rows(&v[1], t)), [[0, 3, 6], [1, 4, 0], [2, 5, 1]]);
    // Step 1's elements: rows 1 and 4 of the first (4..8, 16..20), then 20 + {1, 4, 0}.
    assert_eq!(r.indices(1), [4, 5, 6, 7, 16, 17, 18, 19, 21, 24, 20]);
    // Payload: 2 rows of 4 + 3 rows of 1 = 11 f32 values; compression 44 / 108.
    assert_eq!(r.budget().payload_bytes, 11 * 4);
    assert_eq!(r.budget().dense_bytes, 27 * 4);
    // bf16 buys twice the rows: k = floor(0.5 * 2 * 5) = 5 (all), and floor(7) = 7.
    let b = StridingReplicator::new(0.0, 0.5, 8, &[piece(0, 20), piece(20, 7)], 27, Group::World, WireDtype::Bf16);
    assert_eq!((b.views()[0].k, b.views()[1].k, b.budget().payload_bytes), (5, 7, 27 * 2));
    // What is sent leaves delta, rows whole: g = element index, lr 1, beta 0.
    let g: Vec<f32> = (0..27).map(|i| i as f32).collect();
    let Exchange::Mean { values, .. } = r.fold(0, 1.0, &g) else { panic!("striding averages") };
    assert_eq!(values, [0.0, 1.0, 2.0, 3.0, 12.0, 13.0, 14.0, 15.0, 20.0, 23.0, 26.0]);
}

#[test]
fn striding_sends_every_row_within_ceil_c_over_k_steps_where_the_reference_freezes() {
    // The reference's offset (striding_replicator.py:78), one tensor: (t s k) mod c.
    let reference = |v: &RowView, t: u64| (t as usize * v.stride * v.k) % v.rows;
    for c in 1..=64 {
        for rate in [0.0625, 0.1, 0.125, 0.25, 0.3, 0.5, 1.0] {
            let v = RowView::new(0, c, 64, rate, WireDtype::F32);
            assert_eq!((v.rows, v.k), (c, ((rate * c as f64) as usize).clamp(1, c)), "c {c} rate {rate}");
            assert_eq!(v.stride, c.div_ceil(v.k));
            let mut seen = vec![false; c];
            (0..v.stride as u64).for_each(|t| rows(&v, t).into_iter().for_each(|i| seen[i] = true));
            assert!(seen.iter().all(|&x| x), "c {c} rate {rate}: a row unsent after {} steps", v.stride);
        }
    }
    // The t5 benchmark's rate 0.0625 with c = 64: k = 4, s = 16, s k = 64 = c.
    let v = RowView::new(0, 64 * 3, 64, 0.0625, WireDtype::F32);
    assert_eq!((v.rows, v.width, v.k, v.stride), (64, 3, 4, 16));
    let sent_by_reference: std::collections::BTreeSet<usize> =
        (0..1000).flat_map(|t| (0..v.k).map(move |j| (reference(&v, t) + j * v.stride) % v.rows)).collect();
    assert_eq!(sent_by_reference.into_iter().collect::<Vec<_>>(), [0, 16, 32, 48], "the reference freezes");
    assert_eq!([0, 1, 15, 16].map(|t| v.offset_at(t)), [0, 1, 15, 0], "ours cycles");
}

#[test]
fn striding_repeated_rows_send_one_value_twice_and_leave_once() {
    // c = 9, rate 0.5: k = 4, s = 3, step 0's rows 0, 3, 6, 0 (as in the reference).
    let mut r = StridingReplicator::new(0.5, 0.5, 64, &[piece(0, 9)], 9, Group::World, WireDtype::F32);
    assert_eq!(r.indices(0), [0, 3, 6, 0]);
    let Exchange::Mean { values, .. } = r.fold(0, 1.0, &[1.0; 9]) else { panic!() };
    assert_eq!(values, [1.0; 4], "row 0 twice, the same value");
    assert_eq!(r.state()[0].1, [0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0], "sent rows left delta");
    let mut q = vec![9.0; 9];
    r.unfold(Exchange::Mean { group: Group::World, values: vec![2.0; 4], wire: WireDtype::F32 }, &mut q);
    assert_eq!(q, [2.0, 0.0, 0.0, 2.0, 0.0, 0.0, 2.0, 0.0, 0.0]);
}

#[test]
fn striding_element_offsets_move_and_cover_every_element() {
    // 10 elements, 3 values per step: stride 3, offset t.
    let mut s = StridingElementReplicator::new(0.0, 3, 10, Group::World, WireDtype::F32);
    assert_eq!(s.stride(), 3);
    assert_eq!((0..3).map(|j| s.index(0, j)).collect::<Vec<_>>(), [0, 3, 6]);
    assert_eq!((0..3).map(|j| s.index(1, j)).collect::<Vec<_>>(), [1, 4, 7]);
    assert_eq!((0..3).map(|j| s.index(8, j)).collect::<Vec<_>>(), [8, 1, 4], "wraps around");
    let mut seen = [false; 10];
    (0..10).for_each(|t| (0..3).for_each(|j| seen[s.index(t, j)] = true));
    assert!(seen.iter().all(|&x| x), "every element is sent within n steps");
    let g: Vec<f32> = (0..10).map(|i| i as f32).collect();
    let Exchange::Mean { values, .. } = s.fold(1, 1.0, &g) else { panic!() };
    assert_eq!(values, vec![1.0, 4.0, 7.0]);
}

/// One step of two members: fold, the exchange's mean by hand, unfold,
/// then steps 8-9 (sign, SGD at lr 0.1).
fn two_members<R: Replicator>(reps: &mut [R; 2], t: u64, g: [[f32; 2]; 2], p: &mut [[f32; 2]; 2]) -> bool {
    let exs = [reps[0].fold(t, 0.1, &g[0]), reps[1].fold(t, 0.1, &g[1])];
    let exchanged = !matches!(exs[0], Exchange::Nothing);
    let mean: Option<Vec<f32>> = match &exs {
        [Exchange::Mean { values: a, .. }, Exchange::Mean { values: b, .. }] => {
            Some(a.iter().zip(b).map(|(x, y)| (x + y) / 2.0).collect())
        }
        _ => None,
    };
    for (w, ex) in exs.into_iter().enumerate() {
        let done = match (&mean, ex) {
            (Some(m), Exchange::Mean { group, wire, .. }) => Exchange::Mean { group, values: m.clone(), wire },
            (_, ex) => ex,
        };
        let mut q = [0.0; 2];
        reps[w].unfold(done, &mut q);
        let mut step = DemoStep { weight_decay: 0.0, decay: DecaySegments::none(), sign: true, inner: Inner::Sgd };
        step.apply(0.1, &mut q, &mut p[w]);
    }
    exchanged
}

#[test]
fn diloco_takes_a_local_step_every_step_and_averages_the_gradient_every_nth() {
    // n = 3, lr 0.1, sign, SGD; both members start at [1, 1].
    // Member A's gradient is [0.5, -2] every step, B's [-1.5, 1].
    //   steps 0, 1: no exchange, each applies sign(its own g):
    //     A: [1, 1] - 0.1 [1, -1] = [0.9, 1.1], then [0.8, 1.2];  B: [1.1, 0.9], then [1.2, 0.8]
    //   step 2: the raw gradients averaged: [(0.5 - 1.5) / 2, (-2 + 1) / 2] = [-0.5, -0.5],
    //     sign [-1, -1]: A [0.9, 1.3], B [1.3, 0.9]. No momentum, no parameter averaging.
    let g = [[0.5, -2.0], [-1.5, 1.0]];
    let mut reps = [0, 1].map(|_| DilocoReplicator::new(3, 2, Group::World, WireDtype::F32, 2));
    let mut p = [[1.0, 1.0]; 2];
    let want = [[[0.9, 1.1], [1.1, 0.9]], [[0.8, 1.2], [1.2, 0.8]], [[0.9, 1.3], [1.3, 0.9]]];
    for (t, w) in want.iter().enumerate() {
        let exchanged = two_members(&mut reps, t as u64, g, &mut p);
        assert_eq!(exchanged, t == 2, "step {t}: exchanges every 3rd step only");
        assert!(near(&p[0], &w[0]) && near(&p[1], &w[1]), "step {t}: {p:?}");
    }
    assert!(reps[0].state().is_empty(), "no momentum");
    assert_eq!(reps[0].budget().payload_bytes, 2 * 4);
    assert_eq!(reps[0].budget().compression(), 1.0 / 3.0);
    // diloco-delta on the same input: Q = 0 (sign 0) for two steps, then the momentum.
    let mut reps = [0, 1].map(|_| DilocoDeltaReplicator::new(0.5, 3, 2, Group::World, WireDtype::F32));
    let mut p = [[1.0, 1.0]; 2];
    two_members(&mut reps, 0, g, &mut p);
    two_members(&mut reps, 1, g, &mut p);
    assert_eq!(p, [[1.0, 1.0]; 2], "diloco-delta: no step between exchanges");
}

#[test]
fn diloco_delta_sends_nothing_then_the_whole_momentum() {
    // n = 3, beta 0.5, lr 1, g = 1: delta 1, 1.5, then 1.75 is averaged and leaves.
    let mut d = DilocoDeltaReplicator::new(0.5, 3, 2, Group::World, WireDtype::F32);
    let mut q = vec![9.0; 2];
    for t in 0..2 {
        let ex = d.fold(t, 1.0, &[1.0, 1.0]);
        assert!(matches!(ex, Exchange::Nothing), "step {t}");
        d.unfold(ex, &mut q);
        assert_eq!(q, vec![0.0, 0.0], "nothing arrived: Q = 0");
    }
    let Exchange::Mean { values, .. } = d.fold(2, 1.0, &[1.0, 1.0]) else { panic!("step 2 averages") };
    assert_eq!(values, vec![1.75, 1.75]);
    assert_eq!(d.state()[0].1, vec![0.0, 0.0], "what was sent left delta");
    assert_eq!(d.budget().compression(), 1.0 / 3.0);
}
