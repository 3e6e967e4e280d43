//! Streaming DiLoCo: DiLoCo as its special cases (P = 1, tau = 0, alpha =
//! 0; every offset equal), a one-worker replay of the schedule written
//! out, equal replicas, sim == real, and memory by category.

use super::run;
use crate::optim::{OuterKind, OuterOpt};
use crate::runtime::real::RealSpec;
use crate::strategy::diloco::fragments::{FragmentPattern, Fragments};
use crate::strategy::diloco::streaming::mix;
use crate::strategy::tests::{bits, plan, sim, tiny, workers};
use crate::strategy::*;

fn streaming(h: u64, fragments: usize, overlap: u64, mix: f32) -> StreamingSettings {
    StreamingSettings { h, fragments, overlap: Some(overlap), mix, ..StreamingSettings::default() }
}

fn diloco_of(s: &StreamingSettings) -> Method {
    Method::Diloco(s.diloco())
}

#[test]
fn one_fragment_no_overlap_no_mixing_is_diloco_bit_for_bit() {
    // Rounds of 3, 3, 1 (the last one short), 2 workers, dense and compressed.
    let p = plan(7, 1, 1.0);
    for outer_wire in [None, Some("int8".parse().unwrap())] {
        let s = StreamingSettings { outer_wire, ..streaming(3, 1, 0, 0.0) };
        let a = run(&diloco_of(&s), &sim(2), 2, &p);
        let b = run(&Method::StreamingDiloco(s.clone()), &sim(2), 2, &p);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(bits(&x.params), bits(&y.params), "{outer_wire:?}");
            let loss = |r: &WorkerReport| r.points.iter().map(|q| q.loss).collect::<Vec<_>>();
            assert_eq!(loss(x), loss(y), "{outer_wire:?}");
        }
    }
}

#[test]
fn fragments_that_all_leave_at_the_rounds_end_are_diloco_bit_for_bit() {
    // The outer step is element-wise and the mean too: cutting the model
    // into fragments changes nothing when they travel together.
    let p = plan(7, 1, 1.0);
    for pattern in [FragmentPattern::Strided, FragmentPattern::Sequential] {
        let s = StreamingSettings { same_offset: true, fragment_pattern: pattern, ..streaming(3, 2, 0, 0.0) };
        let a = run(&diloco_of(&s), &sim(2), 2, &p);
        let b = run(&Method::StreamingDiloco(s), &sim(2), 2, &p);
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{pattern:?}");
        assert_eq!(bits(&a[1].params), bits(&b[1].params), "{pattern:?}");
    }
}

#[test]
fn one_worker_replays_the_schedule_written_out() {
    // H = 4, P = 2 strided: fragment 0 leaves after steps 2 and 6, fragment 1
    // after step 4; tau = 1 lands each one step later; the last step (8)
    // synchronises both and takes the global value. One worker: the mean
    // is its own outer gradient.
    let s = StreamingSettings { outer: OuterKind::Nesterov, ..streaming(4, 2, 1, 0.25) };
    let p = plan(8, 1, 1.0);
    let got = run(&Method::StreamingDiloco(s.clone()), &sim(1), 1, &p).remove(0);
    let mut w = workers(1, 2).remove(0);
    let frags = Fragments::new(&w.model.layout, 2, FragmentPattern::Strided).unwrap();
    let mut inner = p.optimizer.try_build(w.model.num_params()).unwrap();
    let mut theta: Vec<Vec<f32>> = (0..2).map(|q| gather(&frags, q, &w.model.params)).collect();
    let mut outer: Vec<OuterOpt> = (0..2).map(|q| OuterOpt::new(s.diloco().outer_config(1), frags.size(q))).collect();
    let mut in_flight: Option<(usize, Vec<f32>, u64)> = None;
    let mut land = |q: usize, delta: &[f32], alpha: f32, params: &mut Vec<f32>, theta: &mut Vec<Vec<f32>>| {
        outer[q].step(&mut theta[q], delta);
        let mut local = gather(&frags, q, params);
        mix(&mut local, &theta[q], alpha);
        frags.scatter(q, &local, params);
    };
    for step in 0..8u64 {
        w.model.zero_grads();
        w.micro_batch(1.0);
        crate::optim::clip_global_norm(w.model.grads_mut(), 1.0);
        let (params, grads) = w.model.params_and_grads();
        inner.step(params, grads, p.schedule.lr(step), &p.decay);
        let done = step + 1;
        if let Some((q, delta, _)) = in_flight.take_if(|f| f.2 == done) {
            land(q, &delta, 0.25, &mut w.model.params, &mut theta);
        }
        let leaving = match done % 4 {
            _ if done == 8 => None,
            2 => Some(0),
            0 => Some(1),
            _ => None,
        };
        if let Some(q) = leaving {
            let delta = outer_gradient(&frags, q, &theta[q], &w.model.params);
            in_flight = Some((q, delta, done + 1));
        }
    }
    assert!(in_flight.is_none(), "fragment 0 left at 6 and landed at 7");
    for q in 0..2 {
        let delta = outer_gradient(&frags, q, &theta[q], &w.model.params);
        land(q, &delta, 0.0, &mut w.model.params, &mut theta);
    }
    assert_eq!(bits(&got.params), bits(&w.model.params));
    assert_eq!((got.points.len(), got.optimizer_steps), (8, 8));
}

fn gather(frags: &Fragments, q: usize, params: &[f32]) -> Vec<f32> {
    let mut v = vec![0.0; frags.size(q)];
    frags.gather(q, params, &mut v);
    v
}

/// theta_old_q - theta_q, written out.
fn outer_gradient(frags: &Fragments, q: usize, theta: &[f32], params: &[f32]) -> Vec<f32> {
    gather(frags, q, params).iter().zip(theta).map(|(new, old)| old - new).collect()
}

#[test]
fn overlap_and_mixing_keep_the_global_model_equal_and_sim_gives_reals_bits() {
    // With alpha > 0 the local replicas differ, theta_old does not: the
    // run ends on it. The real runtime overlaps for real: the same bits.
    let p = plan(8, 1, 1.0);
    let s = StreamingSettings { outer_wire: Some("fp4".parse().unwrap()), ..streaming(4, 2, 1, 0.5) };
    for m in [Method::StreamingDiloco(streaming(4, 2, 1, 0.5)), Method::StreamingDiloco(s)] {
        let a = run(&m, &sim(2), 2, &p);
        let b = run(&m, &Runtime::Real(RealSpec::flat(2)), 2, &p);
        assert_eq!(bits(&a[0].params), bits(&a[1].params), "{m}: replicas end on theta_old");
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{m}: sim != real");
    }
    let d = run(&diloco_of(&streaming(4, 2, 1, 0.5)), &sim(2), 2, &p);
    let m = run(&Method::StreamingDiloco(streaming(4, 2, 1, 0.5)), &sim(2), 2, &p);
    assert_ne!(bits(&d[0].params), bits(&m[0].params), "fragments, overlap and mixing changed nothing");
}

#[test]
fn memory_counts_theta_old_the_outer_states_and_the_fragment_in_flight() {
    let n = crate::model::ParamLayout::new(&tiny()).len;
    let layout = crate::model::ParamLayout::new(&tiny());
    let largest = {
        let f = Fragments::new(&layout, 2, FragmentPattern::Strided).unwrap();
        f.size(0).max(f.size(1))
    };
    let p = plan(4, 1, 0.0);
    let mem = |s: StreamingSettings| run(&Method::StreamingDiloco(s), &sim(2), 2, &p)[0].memory;
    // Nesterov: theta_old and m, n each over the fragments; the largest fragment in flight.
    let m = mem(streaming(2, 2, 0, 0.5));
    assert_eq!((m.params, m.optimizer, m.comm_buffers, m.outer), (4 * n, 8 * n, 4 * largest, 8 * n));
    // A compressed wire with feedback: staged message, decode buffer, residual.
    let c = mem(StreamingSettings { outer_wire: Some("int8".parse().unwrap()), ..streaming(2, 2, 0, 0.5) });
    assert_eq!(c.outer, 8 * n + 3 * 4 * n);
}

#[test]
fn more_fragments_than_blocks_stops_the_run_with_the_fix() {
    let m = Method::StreamingDiloco(streaming(4, 3, 0, 0.5));
    let e = run_cluster(&m, &sim(1), workers(1, 2), &plan(4, 1, 0.0), &Hooks::default()).unwrap_err();
    let e = format!("{e:#}");
    assert!(e.contains("fragments = 3, but the model has 2 transformer blocks"), "{e}");
}

fn eager(h: u64, fragments: usize, overlap: u64, mix: f32) -> StreamingSettings {
    StreamingSettings { eager: true, ..streaming(h, fragments, overlap, mix) }
}

#[test]
fn eager_with_one_worker_is_the_run_whose_average_lands_at_once() {
    // One worker: the stand-in (E1) is the average, the correction (E2)
    // adds nothing, so tau = 1 with eager updates is tau = 0 without them,
    // to the bit, dense and through a lossy codec (the stand-in uses what
    // the message decodes to).
    let p = plan(8, 1, 1.0);
    for outer_wire in [None, Some("int8".parse().unwrap())] {
        let at_once = StreamingSettings { outer_wire, ..streaming(4, 2, 0, 0.5) };
        let with_eager = StreamingSettings { outer_wire, ..eager(4, 2, 1, 0.5) };
        let a = run(&Method::StreamingDiloco(at_once), &sim(1), 1, &p).remove(0);
        let b = run(&Method::StreamingDiloco(with_eager.clone()), &sim(1), 1, &p).remove(0);
        assert_eq!(bits(&a.params), bits(&b.params), "{outer_wire:?}");
        let loss = |r: &WorkerReport| r.points.iter().map(|q| q.loss).collect::<Vec<_>>();
        assert_eq!(loss(&a), loss(&b), "{outer_wire:?}: the local replica between landings too");
        // Without eager, tau = 1 is another run (the step lands one inner step late).
        let late = run(&Method::StreamingDiloco(StreamingSettings { eager: false, ..with_eager }), &sim(1), 1, &p);
        assert_ne!(loss(&a), loss(&late[0]), "{outer_wire:?}");
    }
}

#[test]
fn one_eager_round_with_two_workers_by_hand() {
    use crate::optim::OuterConfig;
    use crate::strategy::diloco::streaming_eager::{correct, standin};
    // A fragment of 2 values, outer SGD at lr 1 (theta -= g), alpha 0.5, k = 2.
    let sgd = OuterConfig { kind: OuterKind::Sgd, lr: 1.0, ..OuterConfig::default() };
    let theta_old = [1.0, 2.0];
    // Worker i's replica at S5, its delta = theta_old - local, and the others'
    // share of the last average (E3 of the round before).
    let local = [[0.5, 2.5], [0.75, 1.5]];
    let delta = [[0.5, -0.5], [0.25, 0.5]];
    let others = [[0.25, 0.0], [0.0, 0.25]];
    // E1: g~ = delta / 2 + others; theta~ = theta_old - g~; S9: alpha local + (1 - alpha) theta~.
    let want_g = [[0.5, -0.25], [0.125, 0.5]];
    let want_standin = [[0.5, 2.25], [0.875, 1.5]];
    let want_mixed = [[0.5, 2.375], [0.8125, 1.5]];
    // Lands: Delta = mean = (0.375, 0); theta_outer = (0.625, 2).
    let avg = [0.375, 0.0];
    let mut theta = theta_old;
    OuterOpt::new(sgd, 2).step(&mut theta, &avg);
    assert_eq!(theta, [0.625, 2.0]);
    // Worker 0 took one inner step of (+0.125, 0) in flight; worker 1 none.
    let moved = [[0.125, 0.0], [0.0, 0.0]];
    // E2: += 0.5 (theta_outer - theta~), which is the mix with the true step plus the steps in flight.
    let want_corrected = [[0.6875, 2.25], [0.6875, 1.75]];
    // E3: others = Delta - delta / 2: each worker's is the other one's share, delta_j / 2.
    let want_others = [[0.125, 0.25], [0.25, -0.25]];
    for i in 0..2 {
        let mut g = [0.0; 2];
        standin(&mut g, &delta[i], &others[i], 2);
        assert_eq!(g, want_g[i], "worker {i}: E1");
        let mut th = theta_old;
        OuterOpt::new(sgd, 2).step(&mut th, &g);
        assert_eq!(th, want_standin[i], "worker {i}: the stand-in step");
        let mut x = local[i];
        mix(&mut x, &th, 0.5);
        assert_eq!(x, want_mixed[i], "worker {i}: S9 at once");
        x[0] += moved[i][0];
        correct(&mut x, &theta, &th, 0.5);
        assert_eq!(x, want_corrected[i], "worker {i}: E2");
        let mut as_if = local[i];
        mix(&mut as_if, &theta, 0.5);
        assert_eq!([as_if[0] + moved[i][0], as_if[1]], x, "worker {i}: as if the average had landed at once");
        let o: Vec<f32> = avg.iter().zip(&delta[i]).map(|(a, d)| a - d / 2.0).collect();
        assert_eq!(o, want_others[i], "worker {i}: E3");
        assert_eq!(o, delta[1 - i].map(|d| d / 2.0), "worker {i}: the other's share");
    }
}

#[test]
fn eager_keeps_the_global_model_equal_and_sim_gives_reals_bits() {
    let p = plan(8, 1, 1.0);
    let fp4 = StreamingSettings { outer_wire: Some("fp4".parse().unwrap()), ..eager(4, 2, 1, 0.5) };
    for m in [Method::StreamingDiloco(eager(4, 2, 1, 0.5)), Method::StreamingDiloco(fp4)] {
        let a = run(&m, &sim(2), 2, &p);
        let b = run(&m, &Runtime::Real(RealSpec::flat(2)), 2, &p);
        assert_eq!(bits(&a[0].params), bits(&a[1].params), "{m}: replicas end on theta_old");
        assert_eq!(bits(&a[0].params), bits(&b[0].params), "{m}: sim != real");
    }
    let plain = run(&Method::StreamingDiloco(streaming(4, 2, 1, 0.5)), &sim(2), 2, &p);
    let with_eager = run(&Method::StreamingDiloco(eager(4, 2, 1, 0.5)), &sim(2), 2, &p);
    assert_ne!(bits(&plain[0].params), bits(&with_eager[0].params), "eager updates changed nothing");
}

#[test]
fn eager_memory_counts_the_others_share_and_the_stand_in() {
    let layout = crate::model::ParamLayout::new(&tiny());
    let n = layout.len;
    let f = Fragments::new(&layout, 2, FragmentPattern::Strided).unwrap();
    let largest = f.size(0).max(f.size(1));
    let p = plan(4, 1, 0.0);
    let mem = |s: StreamingSettings| run(&Method::StreamingDiloco(s), &sim(2), 2, &p)[0].memory;
    // Nesterov: others (n), and g~, theta~ and the copied momentum of the largest fragment.
    assert_eq!(mem(eager(3, 2, 1, 0.5)).outer, mem(streaming(3, 2, 1, 0.5)).outer + 4 * (n + 3 * largest));
}
