//! CO2 (co2.txt, Algorithm 1) checked line by line on numbers small enough
//! to follow by hand, against a replay of the whole algorithm, against the
//! appendix's eq. 10, and sharded against unsharded.

use super::*;
use super::{co2, max_diff, sgd_plan};
use crate::comm::{LinkModel, Tier};
use crate::optim::DecaySegments;
use crate::runtime::sim::SimSpec;
use crate::strategy::local::co2_outer::{clip, staleness_gap, Outer};
use crate::strategy::local::settings::Beta;
use crate::strategy::tests::{bits, sim, tiny, workers};

const LR: f32 = 0.05;

#[test]
fn eq3_staleness_gap_is_element_wise_with_its_plus_one() {
    // Lambda = |x0 - x0_prev| / (tau |x1_prev - x0_prev|) + 1, per coordinate:
    // |3 - 1| / (2 |1.5 - 1|) + 1 = 2 / 1 + 1 = 3;  |1 - 1| / (2 * 0.25) + 1 = 1;
    // |0 - 2| / (4 |1 - 2|) + 1 = 0.5 + 1 = 1.5.
    assert_eq!(staleness_gap(3.0, 1.0, 1.5, 2.0), 3.0);
    assert_eq!(staleness_gap(1.0, 1.0, 1.25, 2.0), 1.0);
    assert_eq!(staleness_gap(0.0, 2.0, 1.0, 4.0), 1.5);
    // A coordinate that did not move in the first inner step: 0/0 -> Lambda 1,
    // a/0 -> Lambda inf (its new displacement is ignored).
    assert_eq!(staleness_gap(1.0, 1.0, 1.0, 12.0), 1.0);
    assert_eq!(staleness_gap(2.0, 1.0, 1.0, 12.0), f32::INFINITY);
}

#[test]
fn clip_is_coordinate_wise_and_can_be_off() {
    use crate::strategy::local::settings::Clip;
    assert_eq!([-3.0, -0.5, 0.5, 3.0].map(|m| clip(m, Clip::Phi(1.0))), [-1.0, -0.5, 0.5, 1.0]);
    assert_eq!(clip(-3.0, Clip::Off), -3.0);
}

/// Settings with alpha 0.5, beta 0.5, tau 2 and the given penalty and clip.
fn hand(penalty: bool, c: crate::strategy::local::settings::Clip) -> Co2Settings {
    Co2Settings { tau: 2, outer_lr: 0.5, outer_momentum: Beta::Value(0.5), penalty, clip: c, ..Co2Settings::paper() }
}

#[test]
fn lines_11_to_13_by_hand_with_one_step_stale_momentum() {
    use crate::strategy::local::settings::Clip;
    // Two coordinates. State at t: x_{t,0} = (3, 1), x_{t-1,0} = (1, 1),
    // x_{t-1,1} = (1.5, 1.25), m_{t-1} = (2, -4); the average that arrives
    // is x_{t-1,tau} = (0, 2) (round t-1's, not round t's).
    let mut o = Outer {
        x0: vec![3.0, 1.0],
        x0_prev: vec![1.0, 1.0],
        x1_prev: vec![1.5, 1.25],
        x1: vec![7.0, 7.0],
        m: vec![2.0, -4.0],
    };
    o.step(&[0.0, 2.0], &hand(true, Clip::Off), 2);
    // Lambda = (3, 1) (eq. 3 above). Line 12, with x_{t-1,0} - x_{t-1,tau} = (1, -1):
    // m_t = 0.5 (2, -4) + (1 / 3, -1 / 1) = (1 + 1/3, -3).
    assert_eq!(o.m, vec![0.5 * 2.0 + 1.0 / 3.0, -3.0]);
    // Line 13: x_{t+1,0} = (3, 1) - 0.5 m_t = (3 - 0.5 (4/3), 2.5).
    assert_eq!(o.x0, vec![3.0 - 0.5 * (1.0 + 1.0 / 3.0), 2.5]);
    // The versions move on: x_{t,0} and x_{t,1} become the previous ones.
    assert_eq!((o.x0_prev.clone(), o.x1_prev.clone()), (vec![3.0, 1.0], vec![7.0, 7.0]));
    // Without the penalty, line 12 is SlowMo's (Lambda = 1): m = (1 + 1, -2 - 1).
    let mut p = Outer { x0: vec![3.0, 1.0], x0_prev: vec![1.0, 1.0], x1_prev: vec![], x1: vec![], m: vec![2.0, -4.0] };
    p.step(&[0.0, 2.0], &hand(false, Clip::Off), 2);
    assert_eq!((p.m.clone(), p.x0.clone()), (vec![2.0, -3.0], vec![2.0, 2.5]));
}

#[test]
fn the_clip_changes_the_applied_update_and_not_the_momentum() {
    use crate::strategy::local::settings::Clip;
    // The reference implementation computed Clip(m, phi) and then applied
    // m. Here m_t = (2, -3) (as above, no penalty) and phi = 0.5: the update
    // applied is alpha * (0.5, -0.5), and the stored momentum stays (2, -3).
    let mut o = Outer { x0: vec![3.0, 1.0], x0_prev: vec![1.0, 1.0], x1_prev: vec![], x1: vec![], m: vec![2.0, -4.0] };
    o.step(&[0.0, 2.0], &hand(false, Clip::Phi(0.5)), 2);
    assert_eq!(o.x0, vec![3.0 - 0.25, 1.0 + 0.25], "x_{{t+1,0}} = x_{{t,0}} - alpha Clip(m_t, phi)");
    assert_ne!(o.x0, vec![2.0, 2.5], "the unclipped update must not be applied");
    assert_eq!(o.m, vec![2.0, -3.0]);
}

#[test]
fn the_first_outer_iteration_does_not_move_the_outer_iterate() {
    let mut o = Outer::new(&[1.0, 2.0], true);
    o.record_first_step(&[1.5, 2.5]);
    o.skip();
    assert_eq!((o.x0.clone(), o.x0_prev.clone(), o.m.clone()), (vec![1.0, 2.0], vec![1.0, 2.0], vec![0.0, 0.0]));
    assert_eq!(o.x1_prev, vec![1.5, 2.5], "x_{{0,1}} is kept for Lambda_1");
}

/// Algorithm 1 replayed by hand on two workers with SGD (lr LR), each with
/// its own outer state (Lambda is local); the final model is the average of
/// the last inner loop's results. Also returns how many coordinates were
/// clipped over the run, and, with `ignore_clip`, applies m unclipped.
fn co2_replay(s: &Co2Settings, rounds: usize, ignore_clip: bool) -> (Vec<f32>, usize) {
    use crate::strategy::local::settings::Clip;
    let mut ws = workers(2, 2);
    let n = ws[0].model.num_params();
    let mut opts: Vec<_> = (0..2).map(|_| sgd_plan(1).optimizer.try_build(n).unwrap()).collect();
    let x00 = ws[0].model.params.clone();
    let (mut x0, mut x0p, mut x1p, mut x1) =
        (vec![x00.clone(); 2], vec![x00.clone(); 2], vec![x00.clone(); 2], vec![x00; 2]);
    let mut m = vec![vec![0.0f32; n]; 2];
    let mut prev_avg: Option<Vec<f32>> = None;
    let (alpha, beta, tau) = (s.outer_lr, s.outer_momentum.at(2), s.tau as f32);
    let mut clipped = 0;
    for t in 0..rounds {
        for i in 0..2 {
            ws[i].model.params.copy_from_slice(&x0[i]);
            for k in 0..s.tau {
                ws[i].model.zero_grads();
                ws[i].micro_batch(1.0);
                let w = &mut ws[i].model;
                let (params, grads) = w.params_and_grads();
                opts[i].step(params, grads, LR, &DecaySegments::none());
                if k == 0 {
                    x1[i].copy_from_slice(&ws[i].model.params);
                }
            }
        }
        let avg: Vec<f32> = (0..n).map(|e| (ws[0].model.params[e] + ws[1].model.params[e]) / 2.0).collect();
        for i in 0..2 {
            let next: Vec<f32> = match &prev_avg {
                None => x0[i].clone(), // t = 0: lines 8-13 skipped
                Some(a) => (0..n)
                    .map(|e| {
                        let num = (x0[i][e] - x0p[i][e]).abs();
                        let den = tau * (x1p[i][e] - x0p[i][e]).abs();
                        let lambda = match (s.penalty, den == 0.0, num == 0.0) {
                            (false, _, _) => 1.0,
                            (true, true, true) => 1.0,
                            (true, true, false) => f32::INFINITY,
                            (true, false, _) => num / den + 1.0,
                        };
                        m[i][e] = beta * m[i][e] + (x0p[i][e] - a[e]) / lambda;
                        let applied = match s.clip {
                            Clip::Phi(phi) if !ignore_clip && m[i][e].abs() > phi => {
                                clipped += 1;
                                phi * m[i][e].signum()
                            }
                            _ => m[i][e],
                        };
                        x0[i][e] - alpha * applied
                    })
                    .collect(),
            };
            x0p[i] = std::mem::replace(&mut x0[i], next);
            x1p[i].copy_from_slice(&x1[i]);
        }
        prev_avg = Some(avg);
        let _ = t;
    }
    (prev_avg.unwrap(), clipped)
}

#[test]
fn co2_follows_algorithm_1_step_by_step() {
    use crate::strategy::local::settings::Clip;
    // 4 rounds of tau 2: the penalty is on, and phi is small enough that
    // the clip binds on some coordinates and not on others.
    let s = Co2Settings {
        tau: 2,
        outer_lr: 0.8,
        outer_momentum: Beta::Value(0.6),
        penalty: true,
        clip: Clip::Phi(2e-4),
        ..Co2Settings::paper()
    };
    let got = run_cluster(&Method::Co2(s.clone()), &sim(2), workers(2, 2), &sgd_plan(8), &Hooks::default()).unwrap();
    let (want, clipped) = co2_replay(&s, 4, false);
    let n = want.len();
    assert!(clipped > 0 && clipped < 2 * 2 * n, "the clip must bind on some coordinates only ({clipped})");
    assert_eq!(bits(&got[0].params), bits(&want));
    assert_eq!(bits(&got[1].params), bits(&want), "both workers end on the average");
    // A clip computed and thrown away (the reference bug) is caught.
    let (unclipped, _) = co2_replay(&s, 4, true);
    assert!(max_diff(&unclipped, &want) > 0.0);
    // Without the penalty, and without clipping: each variant is replayed too.
    for s in [Co2Settings { penalty: false, ..s.clone() }, Co2Settings { clip: Clip::Off, ..s.clone() }] {
        let got =
            run_cluster(&Method::Co2(s.clone()), &sim(2), workers(2, 2), &sgd_plan(8), &Hooks::default()).unwrap();
        assert_eq!(bits(&got[0].params), bits(&co2_replay(&s, 4, false).0), "{s:?}");
    }
}

#[test]
fn co2_without_penalty_and_clip_and_with_instant_averages_is_eq_10() {
    use crate::strategy::local::settings::Clip;
    // Eq. 10: x_{t+1,0} = x_{t,0} - alpha gamma sum_k g_{t-1,k} + beta (x_{t,0} - x_{t-1,0})
    // (lambda = 1), g_{t-1,k} the workers' mean gradient at inner step k of
    // round t-1 (eq. 6), x_{1,0} = x_{0,0}; the run's model is
    // x_{T-1,tau} = x_{T-1,0} - gamma sum_k g_{T-1,k} (eq. 8). Free
    // communication, so every AAR completes at once. The algebraic form
    // rounds differently, by a few ulp of |x| < 2 (1.2e-7) per round: 5
    // rounds allowed 2e-6 (measured: 3.6e-7).
    let (beta, clip) = (Beta::Value(0.5), Clip::Off);
    let s = Co2Settings { tau: 3, outer_lr: 0.7, outer_momentum: beta, penalty: false, clip, ..Co2Settings::paper() };
    let rounds = 5;
    let got = run_cluster(&Method::Co2(s.clone()), &sim(2), workers(2, 2), &sgd_plan(15), &Hooks::default()).unwrap();
    let mut ws = workers(2, 2);
    let n = ws[0].model.num_params();
    let (mut x, mut x_prev) = (ws[0].model.params.clone(), ws[0].model.params.clone());
    let mut sum_prev: Option<Vec<f32>> = None;
    let mut last = Vec::new();
    for _ in 0..rounds {
        // Round t from x_{t,0}: the workers' gradients along their own paths.
        let mut sum = vec![0.0f32; n];
        for w in ws.iter_mut() {
            w.model.params.copy_from_slice(&x);
            for _ in 0..s.tau {
                w.model.zero_grads();
                w.micro_batch(1.0);
                for (e, g) in w.model.grads().iter().enumerate() {
                    sum[e] += g / 2.0;
                }
                let (params, grads) = w.model.params_and_grads();
                params.iter_mut().zip(grads.iter()).for_each(|(p, g)| *p -= LR * g);
            }
        }
        last = x.iter().zip(&sum).map(|(x, g)| x - LR * g).collect();
        let next: Vec<f32> = match &sum_prev {
            None => x.clone(),
            Some(g) => (0..n).map(|e| x[e] - s.outer_lr * LR * g[e] + 0.5 * (x[e] - x_prev[e])).collect(),
        };
        x_prev = std::mem::replace(&mut x, next);
        sum_prev = Some(sum);
    }
    let worst = max_diff(&got[0].params, &last);
    assert!(worst < 2e-6, "max |co2 - eq. 10| = {worst}");
}

#[test]
fn shard_outer_gives_the_unsharded_bits_where_all_workers_compute_the_same_update() {
    use crate::strategy::local::settings::Clip;
    // 3 workers (the vector is padded to a multiple of 3), AdamW, a clip
    // that binds, penalty off: the same bits sharded and unsharded.
    assert_ne!(crate::model::ParamLayout::new(&tiny()).len % 3, 0);
    let p = crate::strategy::tests::plan(8, 1, 1.0);
    let run = |s: &Co2Settings, world: usize| {
        run_cluster(&Method::Co2(s.clone()), &sim(world), workers(world, 2), &p, &Hooks::default()).unwrap()
    };
    let off = Co2Settings { penalty: false, clip: Clip::Phi(1e-3), ..co2(2) };
    let (a, b) = (run(&off, 3), run(&Co2Settings { shard_outer: true, ..off.clone() }, 3));
    assert_eq!(bits(&a[0].params), bits(&b[0].params));
    assert_eq!(
        a[2].points.iter().map(|p| p.loss).collect::<Vec<_>>(),
        b[2].points.iter().map(|p| p.loss).collect::<Vec<_>>()
    );
    // One worker with the penalty on: its Lambda is the only one.
    let on = co2(2);
    assert_eq!(bits(&run(&on, 1)[0].params), bits(&run(&Co2Settings { shard_outer: true, ..on.clone() }, 1)[0].params));
    // Several workers with the penalty on: each slice takes its owner's
    // Lambda, so the bits differ (the same algorithm to within the
    // penalty's local noise).
    let (a, b) = (run(&on, 3), run(&Co2Settings { shard_outer: true, ..on.clone() }, 3));
    assert_ne!(bits(&a[0].params), bits(&b[0].params));
    assert!(max_diff(&a[0].params, &b[0].params) < 1e-2);
    for run in [&a, &b] {
        for r in run.iter() {
            assert_eq!(bits(&r.params), bits(&run[0].params), "every replica ends on the synchronised model");
        }
    }
}

#[test]
fn shard_outer_keeps_a_slice_of_the_outer_state() {
    // Unsharded (penalty on): x_{t,0}, x_{t-1,0}, x_{t-1,1}, x_{t,1} and m,
    // 5 copies, plus the replica in flight. Sharded over 4 workers: a
    // quarter of them, plus the padded reduce-scatter input and its output slice.
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let padded = crate::comm::padded_len(n, 4);
    let p = crate::strategy::tests::plan(4, 1, 0.0);
    let mem =
        |s: Co2Settings| run_cluster(&Method::Co2(s), &sim(4), workers(4, 1), &p, &Hooks::default()).unwrap()[0].memory;
    let full = mem(co2(2));
    assert_eq!((full.outer, full.comm_buffers), (4 * 5 * n, 4 * n));
    let off = mem(Co2Settings { penalty: false, ..co2(2) });
    assert_eq!(
        off.outer,
        4 * 3 * n,
        "without the penalty: x_{{t,0}}, x_{{t-1,0}}, m (Table 1's 4 copies with the buffer)"
    );
    let sharded = mem(Co2Settings { shard_outer: true, ..co2(2) });
    assert_eq!((sharded.outer, sharded.comm_buffers), (4 * 5 * padded / 4, 4 * (padded + padded / 4)));
    assert!(sharded.total() < full.total());
    assert_eq!((sharded.params, sharded.grads, sharded.optimizer), (full.params, full.grads, full.optimizer));
}

#[test]
fn co2_hides_the_average_that_slowmo_waits_for() {
    // One parameter all-reduce costs about 3 micro-batches; tau = 6.
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let tier = Tier::line(0.0, 4.0 * n / 3.0);
    let rt = Runtime::Sim(SimSpec { link: Some(LinkModel::flat(tier)), ..SimSpec::flat(2, 1.0, None) });
    let summary = |m: Method| {
        let r =
            run_cluster(&m, &rt, workers(2, 1), &crate::strategy::tests::plan(24, 1, 0.0), &Hooks::default()).unwrap();
        let spans: Vec<_> = r.into_iter().flat_map(|w| w.events.into_spans()).collect();
        crate::metrics::summarize(&spans, 2, 0).unwrap()
    };
    let c = summary(Method::Co2(co2(6))).overlap_ratio.unwrap();
    let s = summary(Method::SlowMo(SlowMoSettings { tau: 6, ..SlowMoSettings::default() })).overlap_ratio.unwrap();
    // co2: every average but the final one (which the run's model waits
    // for) runs behind the next round: 3 of 4.
    assert!(c > 0.7, "co2 overlap {c}");
    assert!(s < 0.05, "slowmo overlap {s}");
}
