//! A stop request mid-run (Ctrl-C: strategy/stop.rs): every participant
//! stops at the same boundary with its part of a complete checkpoint, the
//! same checkpoint a run planned to stop there (`--stop-at`) saves, so
//! resuming it continues bit for bit (resume.rs checks those).

use super::resume::{every_method, MemorySink};
use super::*;
use super::{bits, plan, workers};
use crate::runtime::real::RealSpec;
use crate::runtime::sim::SimSpec;
use std::sync::atomic::{AtomicBool, Ordering};

/// Asks for the stop once a participant reports step `at`.
struct Trigger {
    at: u64,
    flag: Arc<AtomicBool>,
}

impl Observer for Trigger {
    fn point(&self, _: usize, point: &StepPoint) {
        if point.step >= self.at {
            self.flag.store(true, Ordering::SeqCst);
        }
    }
}

/// Runs `method` for `steps`, stopped on request once step `at` is
/// reported; returns the round it stopped at and its parts.
fn stopped(method: &Method, rt: &Runtime, steps: u64, at: u64) -> (u64, Vec<SavedPart>) {
    let flag = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(MemorySink::default());
    let hooks = Hooks {
        observer: Some(Arc::new(Trigger { at, flag: flag.clone() })),
        checkpoints: Checkpointing { every: 0, sink: Some(sink.clone()), stop: Some(StopRequest::new(flag)) },
        resumed: Vec::new(),
    };
    let err = run_cluster(method, rt, workers(2, 2), &plan(steps, 1, 1.0), &hooks).err();
    let stop = err.as_ref().and_then(|e| e.downcast_ref::<crate::runtime::Stopped>()).copied();
    let stop = stop.unwrap_or_else(|| panic!("{method}: the run did not stop on request: {err:?}"));
    drop(hooks);
    let sink = Arc::into_inner(sink).unwrap();
    let parts = sink.round(stop.round);
    let all = sink.parts.lock().unwrap().len();
    assert_eq!(parts.len(), all, "{method}: every part saved is of the stop's round {}", stop.round);
    let participants = rt.topology().participants() + usize::from(method.needs_server());
    assert_eq!(parts.len(), participants, "{method}: a part per participant");
    // Asked once step `at` is reported: at that step's boundary if no
    // participant has passed it yet, else a later one, never at the end.
    assert!(stop.round >= at && stop.round < steps, "{method}: stopped at {} (asked at {at})", stop.round);
    (stop.round, parts)
}

/// The parts a run planned to end at `end` saves there.
fn planned(method: &Method, rt: &Runtime, steps: u64, end: u64) -> Vec<SavedPart> {
    let sink = Arc::new(MemorySink::default());
    let hooks =
        Hooks { checkpoints: Checkpointing { every: 0, sink: Some(sink.clone()), stop: None }, ..Hooks::default() };
    run_cluster(method, rt, workers(2, 2), &Plan { end, ..plan(steps, 1, 1.0) }, &hooks).unwrap();
    drop(hooks);
    Arc::into_inner(sink).unwrap().round(end)
}

fn same(method: &Method, a: &[SavedPart], b: &[SavedPart]) {
    assert_eq!(a.len(), b.len(), "{method}");
    for (a, b) in a.iter().zip(b) {
        assert_eq!(a.state.tensors, b.state.tensors, "{method}: participant {}", a.participant);
        assert_eq!(a.worker, b.worker, "{method}: participant {}", a.participant);
        assert_eq!(a.applied, b.applied, "{method}: participant {}", a.participant);
    }
}

#[test]
fn every_method_stops_at_one_boundary_with_the_checkpoint_a_planned_stop_saves_in_sim() {
    let rt = Runtime::Sim(SimSpec { speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) });
    let mut methods = every_method();
    methods.extend(crate::strategy::local::tests::local_methods(3));
    for method in &methods {
        let (round, parts) = stopped(method, &rt, 12, 2);
        let want = planned(method, &rt, 12, round);
        same(method, &parts, &want);
        for (a, b) in parts.iter().zip(&want) {
            assert_eq!(a.clock, b.clock, "{method}: participant {}'s clock", a.participant);
        }
    }
}

#[test]
fn threads_agree_on_the_boundary_too() {
    let rt = Runtime::Real(RealSpec::flat(2));
    for method in [Method::Ddp, Method::Zero1, Method::Acco, Method::Demo(DemoSettings::default())]
        .into_iter()
        .chain(crate::strategy::local::tests::local_methods(3))
    {
        for _ in 0..3 {
            let (round, parts) = stopped(&method, &rt, 12, 2);
            if !method.accumulates_while_communicating() {
                same(&method, &parts, &planned(&method, &rt, 12, round));
            }
        }
    }
}

#[test]
fn async_diloco_drains_and_stops_where_the_server_says() {
    let rt = Runtime::Sim(SimSpec { speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) });
    let method = Method::AsyncDiloco(AsyncDilocoSettings { h: 2, ..AsyncDilocoSettings::default() });
    let (round, parts) = stopped(&method, &rt, 12, 3);
    assert_eq!(parts.len(), 3, "both workers and the server");
    same(&method, &parts, &planned(&method, &rt, 12, round));
}

#[test]
fn a_request_at_the_end_changes_nothing() {
    // Asked at the last round: the run ends as planned, with its final checkpoint.
    let flag = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(MemorySink::default());
    let hooks = Hooks {
        observer: Some(Arc::new(Trigger { at: 4, flag: flag.clone() })),
        checkpoints: Checkpointing { every: 0, sink: Some(sink.clone()), stop: Some(StopRequest::new(flag)) },
        resumed: Vec::new(),
    };
    let r = run_cluster(&Method::Ddp, &super::sim(2), workers(2, 2), &plan(4, 1, 1.0), &hooks).unwrap();
    assert_eq!(r[0].points.len(), 4);
    let whole = run_cluster(&Method::Ddp, &super::sim(2), workers(2, 2), &plan(4, 1, 1.0), &Hooks::default()).unwrap();
    assert_eq!(bits(&r[0].params), bits(&whole[0].params));
    assert_eq!(sink.round(4).len(), 2);
}
