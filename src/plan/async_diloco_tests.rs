//! plan's async DiLoCo row by hand (async_diloco.rs).

use super::*;
use crate::comm::link::{LinkModel, Tier};
use crate::runtime::sim::SimSpec;
use crate::runtime::Topology;

fn costing(workers: usize, precision: Precision) -> Costing {
    let mut spec = SimSpec::flat(workers, 0.5, Some(LinkModel::flat("1gbit,1ms".parse::<Tier>().unwrap())));
    spec.topology = Topology { workers, per_node: 1, server: false };
    let f32 = crate::comm::WireDtype::F32;
    Costing { tokens_per_micro_batch: 1000, ..Costing::for_test(1_000_000, spec, f32, precision) }
}

#[test]
fn cycle_bounds_and_memory_by_hand() {
    let s = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
    let c = costing(4, Precision::F32);
    let p = plan(&s, &c).unwrap();
    // One message: (16 + 8 + 4e6) bytes at 1 Gbit/s (1.25e8 B/s) + 1 ms.
    let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
    // No costed local work besides micro-batches here: T = 2 msg + 10 x 0.5.
    let t = 2.0 * msg + 5.0;
    assert!((p.time.round_s - t).abs() < 1e-12, "{} vs {t}", p.time.round_s);
    // Best: 4 workers x 10 x 1000 tokens per cycle; the worst cycle adds 3 other updates taken in
    // by the server's link first and 3 serves (one message each).
    assert!((p.tokens_per_s - 4.0 * 1e4 / t).abs() < 1e-6);
    assert!(p.time.rule.contains(&format!("{:.4} s when every other", t + 6.0 * msg)), "{}", p.time.rule);
    assert!(!p.time.exact);
    // Memory (f32, AdamW s = 2): worker 4n + 4n + 8n + theta_old 4n; server theta + Nesterov momentum.
    let (w, sv) = memory(&s.diloco(), &c).unwrap();
    assert_eq!((w.params, w.grads, w.optimizer, w.outer), (4_000_000, 4_000_000, 8_000_000, 4_000_000));
    assert_eq!((sv.params, sv.outer), (4_000_000, 4_000_000));
    // Mixed: bf16 values, K = 12 bytes of optimizer state per parameter.
    let (w, _) = memory(&s.diloco(), &costing(4, Precision::Mixed)).unwrap();
    assert_eq!((w.params, w.optimizer), (2_000_000, 12_000_000));
}

#[test]
fn a_compressed_update_sends_the_codecs_bytes_and_holds_its_buffers() {
    // int8 on 1e6 values: 245 chunks of 4096 (the last 576), 4 bytes of scale each.
    let s = AsyncDilocoSettings { h: 10, outer_wire: Some(OuterWire::Int8), ..AsyncDilocoSettings::default() };
    let c = costing(4, Precision::F32);
    let packed = 1_000_000 + 4 * 245;
    assert_eq!(OuterWire::Int8.wire_bytes(1_000_000), packed);
    let p = plan(&s, &c).unwrap();
    assert_eq!(p.time.bytes_inter, (16 + 8 + packed) as f64);
    // The cycle: the model fetch dense, the update packed (no costed elementwise work here).
    let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
    let upd = 1e-3 + (16.0 + 8.0 + packed as f64) / 1.25e8;
    assert!((p.time.round_s - (msg + 5.0 + upd)).abs() < 1e-12, "{}", p.time.round_s);
    assert!(p.label.contains("outer_wire int8 + error feedback"), "{}", p.label);
    // Worker: theta_old, the staged message and the residual; without feedback no residual.
    let (w, sv) = memory(&s.diloco(), &c).unwrap();
    assert_eq!((w.outer, sv.outer), (3 * 4_000_000, 4_000_000));
    let plain = AsyncDilocoSettings { error_feedback: false, ..s };
    assert_eq!(memory(&plain.diloco(), &c).unwrap().0.outer, 2 * 4_000_000);
}

#[test]
fn the_server_bounds_the_cycle_when_updates_are_cheap_to_compute() {
    // 64 workers, H = 1: the server's 64 model sends take longer than a worker's own cycle.
    let s = AsyncDilocoSettings { h: 1, ..AsyncDilocoSettings::default() };
    let p = plan(&s, &costing(64, Precision::F32)).unwrap();
    let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
    assert!((p.time.round_s - 64.0 * msg).abs() < 1e-9, "{}", p.time.round_s);
}

#[test]
fn on_shared_cores_the_other_workers_exchanges_slow_the_local_work_by_hand() {
    // 2 workers, H = 10 of 0.5 s: 5 s of local work; the other worker's
    // upload and model, 2 msg = 0.066 s, run beside it at 1.5x: 2 msg
    // seconds of wall do 2 msg / 1.5 of work, so it ends 2 msg (1 - 1/1.5) later.
    let s = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
    let mut c = costing(2, Precision::F32);
    let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
    let alone = cycles(&s, &c);
    assert!((alone.steady[0] - (2.0 * msg + 5.0)).abs() < 1e-12);
    assert_eq!(alone.steady[0], alone.bounds[0].0);
    c.spec.interference.beside = 1.5;
    let shared = cycles(&s, &c);
    let want = 2.0 * msg + 5.0 + 2.0 * msg * (1.0 - 1.0 / 1.5);
    assert!((shared.steady[0] - want).abs() < 1e-12, "{} vs {want}", shared.steady[0]);
    // The row follows the staggered cycle; the bounds stay bounds: the
    // lower unslowed, the upper with all the local work at 1.5x.
    let p = plan(&s, &c).unwrap();
    assert!((p.time.round_s - want).abs() < 1e-12, "{}", p.time.round_s);
    // Its compute is the slowed local work; only the two messages are exposed.
    assert!((p.time.exposed_s - 2.0 * msg).abs() < 1e-12, "{}", p.time.exposed_s);
    assert_eq!(shared.bounds[0].0, alone.bounds[0].0);
    let hi = 2.0 * msg + 5.0 * 1.5 + 2.0 * msg;
    assert!((shared.bounds[0].1 - hi).abs() < 1e-12, "{:?}", shared.bounds[0]);
    // Local work shorter than the exchanges beside it: all of it at 1.5x.
    let short = AsyncDilocoSettings { h: 1, ..s.clone() };
    c.spec.micro_batch_s = 0.01;
    let local = 0.01;
    assert!(local * 1.5 <= 2.0 * msg);
    let got = cycles(&short, &c).steady[0];
    assert!((got - (2.0 * msg + local * 1.5)).abs() < 1e-12, "{got}");
}

#[test]
fn beside_the_other_direction_each_message_slows_for_the_others_share_by_hand() {
    // One way 1 MB/s (ping-pong); both ways at once 1.25 s a MB (the
    // all-reduce's message): duplex factor 1.25. 250k values: a
    // 1_000_024 B message, msg = 1.000024 s. 2 workers, H = 10 of 0.2
    // s: L = 2 s. Steady, symmetric: m = msg (1 + 0.25 m / T), T = 2m + L,
    // so 2m^2 + (L - 2 msg - 0.25 msg) m - msg L = 0.
    let sweep = crate::comm::link_measured::AllReduceSweep {
        members: 2,
        all_reduce: vec![[2e6, 2.5], [2e7, 25.0]],
        ping_pong: vec![[1e6, 1.0], [1e7, 10.0]],
    };
    let tier = Tier {
        measured: Some(sweep.message_times().unwrap()),
        p2p: sweep.point_to_point_times().unwrap(),
        ..Tier::line(0.0, 1e6)
    };
    let mut spec = SimSpec::flat(2, 0.2, Some(LinkModel::flat(tier)));
    spec.topology = Topology { workers: 2, per_node: 1, server: false };
    let f32 = crate::comm::WireDtype::F32;
    let c = Costing { tokens_per_micro_batch: 1000, ..Costing::for_test(250_000, spec, f32, Precision::F32) };
    let s = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
    let got = cycles(&s, &c);
    let (msg, l) = (1.000024, 2.0);
    assert!((got.msg - msg).abs() < 1e-12, "{}", got.msg);
    let (qa, qb, qc) = (2.0, l - 2.0 * msg - 0.25 * msg, -msg * l);
    let m = (-qb + (qb * qb - 4.0 * qa * qc).sqrt()) / (2.0 * qa);
    assert!((got.steady[0] - (2.0 * m + l)).abs() < 1e-9, "{} vs {}", got.steady[0], 2.0 * m + l);
    // About 6% on each message here (m / msg = 1.064), not the full 25%.
    assert!((m / msg - 1.0645).abs() < 1e-3, "{}", m / msg);
    // The bounds: the lower with nothing the other way; the upper with
    // every message slowed all through, its own two and the other's
    // update and model served first.
    let (lo, hi) = got.bounds[0];
    assert!((lo - (2.0 * msg + l)).abs() < 1e-12 && (hi - (4.0 * 1.25 * msg + l)).abs() < 1e-12, "{lo} {hi}");
}

#[test]
fn dylu_and_the_grace_period_by_hand() {
    // Speeds 1 and 0.5, H = 10: DyLU gives 10 and 5 steps of 0.5 s, 5 s of
    // work for both (the point of eq. 6); without it the slow one works 10 s.
    let mut c = costing(2, Precision::F32);
    c.spec.speeds = vec![1.0, 0.5];
    let msg = 1e-3 + (16.0 + 8.0 + 4e6) / 1.25e8;
    let near = |got: &[f64], want: &[f64]| {
        assert!(
            got.len() == want.len() && got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{got:?} vs {want:?}"
        )
    };
    let plain = AsyncDilocoSettings { h: 10, ..AsyncDilocoSettings::default() };
    let lower = |s: &AsyncDilocoSettings| cycles(s, &c).bounds.iter().map(|b| b.0).collect::<Vec<_>>();
    near(&lower(&plain), &[2.0 * msg + 5.0, 2.0 * msg + 10.0]);
    let dylu = AsyncDilocoSettings { dylu: true, ..plain.clone() };
    assert_eq!(cycles(&dylu, &c).steps, [10, 5]);
    near(&lower(&dylu), &[2.0 * msg + 5.0; 2]);
    // grace "auto": 0 without DyLU; with it one step of the slowest worker, 0.5 s / 0.5 = 1 s.
    assert_eq!((cycles(&plain, &c).grace, cycles(&dylu, &c).grace), (0.0, 1.0));
    // Tokens per cycle follow each worker's steps: (10 + 5) x 1000 over one cycle.
    let p = plan(&dylu, &c).unwrap();
    assert!((p.tokens_per_s - 15_000.0 / (2.0 * msg + 5.0)).abs() < 1e-6, "{}", p.tokens_per_s);
    assert!(p.label.contains("dylu"), "{}", p.label);
    // A grace period of 2 s: the upper end waits it out (then 1 other update, taken in and
    // served first: 2 messages), the lower end is unchanged.
    let graced = AsyncDilocoSettings { grace: Some(2.0), ..dylu };
    let (lo, hi) = cycles(&graced, &c).bounds[1];
    near(&[lo, hi], &[2.0 * msg + 5.0, 2.0 * msg + 5.0 + 2.0 + 2.0 * msg]);
    assert!(plan(&graced, &c).unwrap().time.rule.contains("grace period"));
}
