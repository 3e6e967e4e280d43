//! Checkpoint and resume of async DiLoCo, its server's part included:
//! 2N rounds == N rounds + save + resume + N rounds, to the last bit and
//! the last virtual second (resume.rs has the other methods).

use super::resume::{resume_from, run_to};
use super::*;
use super::{bits, tiny};
use crate::comm::{LinkModel, Tier};
use crate::runtime::sim::SimSpec;

#[test]
fn async_diloco_resumes_bit_identically_in_sim() {
    // Speeds 1 and 0.5 with DyLU, DN with a buffer of 3 (part full at the
    // checkpoint), a grace period, eq. 2 shards: every piece of the server's
    // state is in play. The checkpoint drains the rounds in flight (module
    // docs of async_diloco.rs), so the stopped run saves what the whole run
    // saves at its boundary, and the resumed run continues it to the bit.
    let method = Method::AsyncDiloco(AsyncDilocoSettings {
        h: 2,
        outer: crate::optim::OuterKind::Dn,
        dn_buffer: Some(3),
        dn_c: 0.25,
        grace: Some(0.4),
        dylu: true,
        shards: Some(3),
        ..AsyncDilocoSettings::default()
    });
    check_async_resume(&method, &two_speeds());
}

#[test]
fn async_diloco_resumes_each_workers_error_feedback_residual_bit_identically() {
    // Top-k + 2 bits leaves most of each pseudo-gradient in the worker's
    // residual: lose it at the resume and every later update differs.
    let method = Method::AsyncDiloco(AsyncDilocoSettings {
        h: 2,
        outer_wire: Some("topk:16+2bit".parse().unwrap()),
        ..AsyncDilocoSettings::default()
    });
    check_async_resume(&method, &two_speeds());
}

/// Two workers at speeds 1 and 0.5 in the simulator, a model taking
/// 0.3 s on the link.
fn two_speeds() -> Runtime {
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let link = LinkModel::flat(Tier::line(0.0, 4.0 * n / 0.3));
    Runtime::Sim(SimSpec { link: Some(link), speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) })
}

/// 2N rounds == N + save + resume + N for async DiLoCo (its server part included).
fn check_async_resume(method: &Method, rt: &Runtime) {
    let (whole, whole_sink) = run_to(&tiny(), method, &sequential(rt), 6, 6, 3, vec![], None, None);
    let (_, first) = run_to(&tiny(), method, rt, 6, 3, 0, vec![], None, None);
    let parts = first.round(3);
    assert_eq!(parts.len(), 3, "a part per worker and the server's");
    let mid = whole_sink.round(3);
    assert_eq!(mid.len(), 3, "the whole run checkpointed at round 3");
    for (a, b) in mid.iter().zip(&parts) {
        assert_eq!(a.state.tensors, b.state.tensors, "participant {}", a.participant);
        assert_eq!(a.state.scalars, b.state.scalars, "participant {}", a.participant);
        assert_eq!(a.clock, b.clock, "participant {}", a.participant);
    }
    let resumed = resume_from(&tiny(), method, rt, parts, None);
    assert_eq!(whole.len(), 3);
    for (a, b) in whole.iter().zip(&resumed) {
        assert_eq!(bits(&a.params), bits(&b.params), "participant {}: parameters differ", a.rank);
        assert_eq!(a.optimizer_steps, b.optimizer_steps, "participant {}", a.rank);
        assert!(
            !b.points.is_empty() && a.points.ends_with(&b.points),
            "participant {}: the curve after the resume",
            a.rank
        );
        assert_eq!(a.times, b.times, "participant {}: clocks and accounting continue exactly", a.rank);
    }
    let (a, b) = (&whole[2], &resumed[2]);
    assert_eq!((&a.updates, &a.shard_rounds), (&b.updates, &b.shard_rounds), "the server's counters and shard draws");
    assert!(
        a.updates.iter().all(|&u| u > 1),
        "every worker sent updates on both sides of the checkpoint: {:?}",
        a.updates
    );
}
