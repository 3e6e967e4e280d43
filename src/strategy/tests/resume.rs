//! Checkpoint and resume of every method, through the engine's parts:
//! 2N rounds == N rounds + save + resume + N rounds, to the last bit (and,
//! in the simulator, to the last virtual second).

use super::*;
use super::{bits, plan, plan_of, tiny, workers, workers_of};
use crate::comm::{LinkModel, Tier};
use crate::runtime::real::RealSpec;
use crate::runtime::sim::SimSpec;
use std::sync::Mutex;

/// Keeps every part in memory.
#[derive(Default)]
pub(super) struct MemorySink {
    pub(super) parts: Mutex<Vec<SavedPart>>,
}

impl PartSink for MemorySink {
    fn submit(&self, part: SavedPart) -> anyhow::Result<()> {
        self.parts.lock().unwrap().push(part);
        Ok(())
    }
}

impl MemorySink {
    /// The parts of `round`, in participant order.
    pub(super) fn round(&self, round: u64) -> Vec<SavedPart> {
        let mut v: Vec<SavedPart> = self.parts.lock().unwrap().iter().filter(|p| p.round == round).cloned().collect();
        v.sort_by_key(|p| p.participant);
        v
    }
}

pub(super) fn every_method() -> Vec<Method> {
    let demo = DemoSettings::default();
    let mut v = vec![
        Method::Ddp,
        Method::Zero1,
        Method::Dpu(DpuSettings { warmup_steps: 2 }),
        Method::AccoWp,
        Method::Acco,
        Method::Demo(demo.clone()),
        // Overlapped: the exchange in flight at the checkpoint is brought in and its Q saved.
        Method::Demo(DemoSettings { overlap: true, replicator: ReplicatorKind::Random, ..demo.clone() }),
        // One node of two: sharded state (each worker's shard and its AdamW moments).
        Method::FlexDemo(DemoSettings { overlap: true, inner: InnerKind::DecoupledAdamw, ..demo.clone() }),
    ];
    // The other replicators; diloco's and diloco-delta's period 2 puts the
    // stop at round 3 mid-period (diloco-delta's momentum half gathered,
    // overlapped diloco's local Q pending).
    let every = Some(2);
    v.extend(
        [
            (ReplicatorKind::Striding, false),
            (ReplicatorKind::StridingElement, false),
            (ReplicatorKind::Diloco, false),
            (ReplicatorKind::Diloco, true),
            (ReplicatorKind::DilocoDelta, false),
        ]
        .map(|(replicator, overlap)| Method::Demo(DemoSettings { replicator, overlap, every, ..demo.clone() })),
    );
    // Outer rounds of one step: the stop at step 3 is outer boundary 2, so
    // the resumed run's outer steps use every saved tensor (momentum m_1
    // included; a round-trip through 2 rounds would leave m_0 = 0 untested).
    v.extend(crate::strategy::local::tests::local_methods(1));
    // DiLoCo with momentum and with DN's buffer half full at the checkpoint (N = 2, stop at round 3).
    v.push(crate::strategy::diloco::tests::diloco(1, crate::optim::OuterKind::Nesterov, 0.7));
    v.push(Method::Diloco(DilocoSettings {
        h: 1,
        outer: crate::optim::OuterKind::Dn,
        dn_buffer: Some(2),
        dn_c: 0.25,
        ..DilocoSettings::default()
    }));
    v.push(Method::StreamingDiloco(streaming_at_the_stop()));
    // Eager updates: each fragment's others' share (E3) is state at the stop.
    v.push(Method::StreamingDiloco(StreamingSettings { eager: true, ..streaming_at_the_stop() }));
    v
}

/// Streaming DiLoCo with h = 3, P = 2, tau = 1: fragment 0 leaves after
/// step 1 and lands at 2, fragment 1 leaves at the stop (step 3): its
/// outer gradient is saved unsent, with the local replica (alpha 0.5
/// keeps it off theta_old).
fn streaming_at_the_stop() -> StreamingSettings {
    StreamingSettings { h: 3, fragments: 2, overlap: Some(1), mix: 0.5, ..StreamingSettings::default() }
}

/// Runs `method` to round `end` of `steps`, checkpointing every `every`
/// (under a token budget of `budget` micro-batches per worker, if any).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_to(
    cfg: &GptConfig,
    method: &Method,
    rt: &Runtime,
    steps: u64,
    end: u64,
    every: u64,
    resumed: Vec<Option<SavedPart>>,
    start_params: Option<&[f32]>,
    budget: Option<u64>,
) -> (Vec<WorkerReport>, MemorySink) {
    let sink = std::sync::Arc::new(MemorySink::default());
    let hooks = Hooks {
        observer: None,
        checkpoints: Checkpointing { every, sink: Some(sink.clone()), stop: None },
        resumed: resumed.clone(),
    };
    let mut ws = workers_of(cfg, world(rt), 2);
    for (w, part) in ws.iter_mut().zip(&resumed) {
        w.model.params.copy_from_slice(start_params.expect("a resumed run starts from the checkpoint's model"));
        w.restore(part.as_ref().unwrap().worker.clone().unwrap()).unwrap();
    }
    let p = Plan { end, micro_batch_budget: budget, ..plan_of(cfg, steps, 1, 1.0) };
    let reports = run_cluster(method, rt, ws, &p, &hooks).unwrap();
    drop(hooks);
    (reports, std::sync::Arc::into_inner(sink).unwrap())
}

/// Workers of `rt`.
fn world(rt: &Runtime) -> usize {
    match rt {
        Runtime::Sim(s) => s.topology.workers,
        Runtime::Real(s) => s.topology.workers,
    }
}

/// The runtime with each participant's clock restored from `parts`.
fn restarted(rt: &Runtime, parts: &[SavedPart]) -> Runtime {
    let clocks = parts.iter().map(|p| p.clock.clone()).collect();
    match rt {
        Runtime::Sim(s) => Runtime::Sim(SimSpec { start: clocks, ..s.clone() }),
        Runtime::Real(s) => Runtime::Real(RealSpec { start: clocks, ..s.clone() }),
    }
}

/// `method` on `rt` from the checkpoint `parts` (a stopped run's of 6
/// steps) to its end: the model assembled from the parts, each
/// participant's state and clock restored.
pub(super) fn resume_from(
    cfg: &GptConfig,
    method: &Method,
    rt: &Runtime,
    parts: Vec<SavedPart>,
    budget: Option<u64>,
) -> Vec<WorkerReport> {
    let n = crate::model::ParamLayout::new(cfg).len;
    let model = assemble_model(n, parts.iter().filter_map(|p| p.state.model.clone())).unwrap();
    let rt = restarted(rt, &parts);
    run_to(cfg, method, &rt, 6, 6, 0, parts.into_iter().map(Some).collect(), Some(&model), budget).0
}

fn check_resume(method: &Method, rt: &Runtime, budget: Option<u64>) {
    check_resume_of(&tiny(), method, rt, budget)
}

/// [`check_resume`] for a model of shape `cfg`.
pub(super) fn check_resume_of(cfg: &GptConfig, method: &Method, rt: &Runtime, budget: Option<u64>) {
    // The whole run's simulator computes one at a time, the stopped and
    // resumed runs' at once on the pool (`rt`'s default): resume and the
    // parallel simulator are checked against the sequential bits together.
    let (whole, whole_sink) = run_to(cfg, method, &sequential(rt), 6, 6, 3, vec![], None, budget);
    let (_, first) = run_to(cfg, method, rt, 6, 3, 0, vec![], None, budget);
    let parts = first.round(3);
    assert_eq!(parts.len(), world(rt), "{method}: a part per worker at the stop");
    let mid = whole_sink.round(3);
    for (a, b) in mid.iter().zip(&parts) {
        assert_eq!(
            a.state.tensors, b.state.tensors,
            "{method}: the stopped run saved what the whole run saved at round 3"
        );
    }
    let resumed = resume_from(cfg, method, rt, parts, budget);
    for (a, b) in whole.iter().zip(&resumed) {
        assert_eq!(bits(&a.params), bits(&b.params), "{method}: resumed parameters differ");
        assert_eq!(a.optimizer_steps, b.optimizer_steps, "{method}");
        let tail: Vec<f32> = a.points[3..].iter().map(|p| p.loss).collect();
        assert_eq!(tail, b.points.iter().map(|p| p.loss).collect::<Vec<_>>(), "{method}: losses after the resume");
        if matches!(rt, Runtime::Sim(_)) {
            assert_eq!(a.times, b.times, "{method}: the simulator's clocks and accounting continue exactly");
        }
    }
}

#[test]
fn every_method_resumes_bit_identically_in_sim() {
    // A link slow enough that the overlapping methods accumulate several
    // micro-batches per round, so the resumed interleaving must match too.
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let link = LinkModel::flat(Tier::line(0.0, 4.0 * n / 2.5));
    let rt = Runtime::Sim(SimSpec { link: Some(link), speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) });
    for m in every_method() {
        check_resume(&m, &rt, None);
    }
    // Equal tokens (acco/budget.rs): what is left and applied, and the
    // schedule by tokens, continue exactly (a budget not spent by round 6).
    for m in [Method::Dpu(DpuSettings { warmup_steps: 2 }), Method::AccoWp, Method::Acco] {
        check_resume(&m, &rt, Some(40));
    }
}

#[test]
fn diloco_resumes_its_error_feedback_residual_bit_identically() {
    // The residual is state: lose it at a resume and the next message differs.
    let rt = Runtime::Sim(SimSpec::flat(2, 1.0, None));
    let outer_wire = Some("topk:16+2bit".parse().unwrap());
    check_resume(&Method::Diloco(DilocoSettings { h: 1, outer_wire, ..DilocoSettings::default() }), &rt, None);
}

#[test]
fn streaming_diloco_resumes_each_fragments_error_feedback_residual() {
    // every_method() has the plain one; with top-k + feedback each fragment's residual is state too.
    let rt = Runtime::Sim(SimSpec::flat(2, 1.0, None));
    let outer_wire = Some("topk:16+2bit".parse().unwrap());
    check_resume(&Method::StreamingDiloco(StreamingSettings { outer_wire, ..streaming_at_the_stop() }), &rt, None);
}

#[test]
fn flexdemo_diloco_resumes_each_nodes_own_replica_on_two_nodes() {
    // 2 nodes x 2: diloco's nodes drift apart (no parameter averaging), so
    // the checkpoint's model (node 0's) is not node 1's; each worker
    // resumes from its node's replica. Period 2: the stop is mid-period.
    let topology = crate::runtime::Topology { workers: 4, per_node: 2, server: false };
    let rt = Runtime::Sim(SimSpec { topology, ..SimSpec::flat(4, 1.0, None) });
    let s = DemoSettings { replicator: ReplicatorKind::Diloco, every: Some(2), ..DemoSettings::default() };
    check_resume(&Method::FlexDemo(s.clone()), &rt, None);
    check_resume(&Method::FlexDemo(DemoSettings { overlap: true, ..s }), &rt, None);
}

#[test]
fn timing_independent_methods_resume_bit_identically_on_the_real_runtime() {
    let rt = Runtime::Real(RealSpec::flat(2));
    for m in [Method::Ddp, Method::Zero1, Method::Demo(DemoSettings::default())]
        .into_iter()
        .chain(crate::strategy::local::tests::local_methods(1))
    {
        check_resume(&m, &rt, None);
    }
    // ACCO with a fixed number of micro-batches per stage no longer depends on timing.
    let fixed = Plan { fixed_micro_batches: Some(1), end: 6, ..plan(6, 1, 1.0) };
    let whole = run_cluster(&Method::Acco, &rt, workers(2, 2), &fixed, &Hooks::default()).unwrap();
    let sink = std::sync::Arc::new(MemorySink::default());
    let hooks =
        Hooks { checkpoints: Checkpointing { every: 0, sink: Some(sink.clone()), stop: None }, ..Hooks::default() };
    run_cluster(&Method::Acco, &rt, workers(2, 2), &Plan { end: 3, ..fixed.clone() }, &hooks).unwrap();
    let parts = sink.round(3);
    let model = assemble_model(whole[0].params.len(), parts.iter().filter_map(|p| p.state.model.clone())).unwrap();
    let mut ws = workers(2, 2);
    for (w, p) in ws.iter_mut().zip(&parts) {
        w.model.params.copy_from_slice(&model);
        w.restore(p.worker.clone().unwrap()).unwrap();
    }
    let hooks = Hooks { resumed: parts.iter().cloned().map(Some).collect(), ..Hooks::default() };
    let resumed = run_cluster(&Method::Acco, &restarted(&rt, &parts), ws, &fixed, &hooks).unwrap();
    assert_eq!(bits(&whole[0].params), bits(&resumed[0].params));
}

#[test]
fn checkpoint_refuses_to_save_with_communication_in_flight() {
    // A strategy that saves while a task is in flight gets a clear error.
    let sink = std::sync::Arc::new(MemorySink::default());
    let spec = SimSpec::flat(1, 1.0, None);
    let err = crate::runtime::sim::run(spec, |mut ctx| {
        let sink = sink.clone();
        async move {
            let mut j = Journal::new(0, None, Checkpointing { every: 1, sink: Some(sink), stop: None }, None);
            let h = ctx.start(crate::runtime::AllReduce::sum(
                crate::runtime::Group::World,
                vec![1.0],
                crate::comm::WireDtype::F32,
            ));
            let r = j.round_end(&ctx, None, 1, 1, StrategyState::default).await;
            ctx.wait(h).await;
            r
        }
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("communication task(s) in flight"), "{err}");
}

#[test]
fn tokens_count_only_micro_batches_whose_gradients_were_applied() {
    // One micro-batch per stage (free communication): ACCO computes
    // 1 + 2 per round but its last g~ is never applied; DPU computes
    // 1 + 1 per round and its last gradients are never applied.
    let p = plan(3, 1, 0.0);
    for (m, computed, applied) in
        [(Method::Acco, 7, 6), (Method::Dpu(DpuSettings::default()), 4, 3), (Method::Zero1, 3, 3)]
    {
        let r = run_cluster(&m, &super::sim(2), workers(2, 1), &p, &Hooks::default()).unwrap();
        assert_eq!(r[0].times.micro_batches, computed, "{m}");
        assert_eq!(r[0].points.iter().map(|p| p.micro_batches).sum::<u64>(), applied, "{m}");
    }
}

#[test]
fn local_methods_stopped_inside_a_round_save_at_its_end_and_resume_bit_identically() {
    // tau 2 over 6 steps, a stop asked at step 3: the run finishes the round
    // of steps 3..4 and saves there; the whole run (checkpoints every 3)
    // saves at 4 as well, the first boundary past 3.
    let n = crate::model::ParamLayout::new(&tiny()).len as f64;
    let link = LinkModel::flat(Tier::line(0.0, 4.0 * n / 2.5));
    let rt = Runtime::Sim(SimSpec { link: Some(link), speeds: vec![1.0, 0.5], ..SimSpec::flat(2, 1.0, None) });
    for method in crate::strategy::local::tests::local_methods(2) {
        let (whole, whole_sink) = run_to(&tiny(), &method, &sequential(&rt), 6, 6, 3, vec![], None, None);
        assert!(whole_sink.round(3).is_empty() && whole_sink.round(4).len() == 2, "{method}");
        let (_, first) = run_to(&tiny(), &method, &rt, 6, 3, 0, vec![], None, None);
        let parts = first.round(4);
        assert_eq!(parts.len(), 2, "{method}: saved at the end of the round containing the stop");
        for (a, b) in whole_sink.round(4).iter().zip(&parts) {
            assert_eq!(a.state.tensors, b.state.tensors, "{method}");
        }
        let resumed = resume_from(&tiny(), &method, &rt, parts, None);
        for (a, b) in whole.iter().zip(&resumed) {
            assert_eq!(bits(&a.params), bits(&b.params), "{method}: resumed parameters differ");
            assert_eq!(a.times, b.times, "{method}: clocks continue exactly");
        }
    }
}
