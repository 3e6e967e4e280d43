//! Workers that leave and join an async-diloco run (membership.rs): in sim
//! a crash and a rejoin finish, lose no update that reached the server and
//! report the plan's alive intervals, bit for bit again; a worker down for
//! good is not waited for; threads complete the same run.

use super::*;
use crate::runtime::{real::RealSpec, sim::SimSpec};
use crate::strategy::diloco::membership::{alive_intervals, planned_intervals};
use crate::strategy::faults::FaultPlan;
use crate::strategy::tests::{bits, plan, workers};

fn async_diloco(h: u64, dylu: bool) -> Method {
    Method::AsyncDiloco(AsyncDilocoSettings { h, dylu, ..AsyncDilocoSettings::default() })
}

/// `k` workers, one inner step = 1 virtual second at speed 1.
fn sim(speeds: Vec<f64>) -> Runtime {
    Runtime::Sim(SimSpec { speeds: speeds.clone(), ..SimSpec::flat(speeds.len(), 1.0, None) })
}

fn run_with(m: &Method, rt: &Runtime, k: usize, steps: u64, faults: &str) -> (Vec<WorkerReport>, FaultPlan) {
    let faults = FaultPlan::parse(faults, k).unwrap();
    let p = Plan { faults: faults.clone(), ..plan(steps, 1, 0.0) };
    (run_cluster(m, rt, workers(k, 2), &p, &Hooks::default()).unwrap(), faults)
}

/// No update lost or applied twice: the server applied exactly what each
/// worker sent, one outer step and one curve point per update.
fn assert_every_sent_update_applied_once(r: &[WorkerReport], k: usize) {
    let server = &r[k];
    let sent: Vec<u64> = r[..k].iter().map(|w| w.sent).collect();
    assert_eq!(server.updates, sent, "updates applied per worker == updates each sent");
    let applied: u64 = server.updates.iter().sum();
    assert_eq!(server.optimizer_steps, applied, "each received pseudo-gradient applied once");
    assert_eq!(server.points.len() as u64, applied);
}

#[test]
fn a_crash_and_a_rejoin_finish_lose_no_update_and_match_the_plan() {
    // Rounds of H = 2 steps (2 s). Worker 1 crashes at 3.5 s, in its second
    // round (its check before sending, at 4 s, sees it: that round is lost),
    // and rejoins at 7 s from the server's current model.
    let (k, m) = (3, async_diloco(2, false));
    let (r, faults) = run_with(&m, &sim(vec![1.0; 3]), k, 8, "1:crash@3.5,1:join@7");
    assert_every_sent_update_applied_once(&r, k);
    let records = &r[1].faults;
    let got: Vec<(&str, f64)> = records.iter().map(|f| (f.event.as_str(), f.at_s)).collect();
    assert_eq!(got, [("crash", 3.5), ("join", 7.0)]);
    assert_eq!(records[0].observed_s, 4.0, "noticed at the next inner-step boundary");
    assert_eq!((records[0].step, records[1].step), (4, 4), "two rounds of 2 steps run, none while down");
    assert!(r[0].faults.is_empty() && r[2].faults.is_empty());
    let end = r.iter().flat_map(|w| w.points.last()).map(|p| p.end_s).fold(0.0, f64::max);
    assert!(end > 7.0, "the run outlives the join ({end} s)");
    assert_eq!(alive_intervals(records, k, end), planned_intervals(&faults, k, end));
    assert_eq!(alive_intervals(records, k, end)[1], [(0.0, 3.5), (7.0, end)]);
    // Worker 1's lost round: inner steps it ran beyond the H per update it sent.
    assert_eq!(r[1].optimizer_steps, 2 * r[1].sent + 2, "one round of 2 steps lost");
    // Micro-batches (tokens) count only where an update applied them: H = 2
    // steps of one micro-batch per update sent; the lost round's steps keep
    // their losses in the curve with 0 micro-batches.
    for w in &r[..k] {
        let applied: u64 = w.points.iter().map(|p| p.micro_batches).sum();
        assert_eq!(applied, 2 * w.sent, "micro-batches applied by worker {}", w.rank);
    }
    let lost: Vec<u64> =
        r[1].points.iter().filter(|p| p.end_s > 2.0 && p.end_s <= 4.0).map(|p| p.micro_batches).collect();
    assert_eq!(lost, [0, 0], "the round from 2 s to 4 s was lost");
    // Its step counter continues after the join (its curve's steps keep rising).
    assert!(r[1].points.windows(2).all(|p| p[1].step == p[0].step + 1));
    assert!(r[1].points.iter().any(|p| p.end_s > 7.0), "it trained again after joining");
    assert!(!r[1].points.iter().any(|p| p.end_s > 4.0 && p.end_s <= 7.0), "no step while down");
    // The server's budget, t_max = 8 x 3 local steps, is reached by the updates applied.
    assert!(r[k].updates.iter().sum::<u64>() * 2 >= 24, "{:?}", r[k].updates);
    // Sim with faults is bit-reproducible.
    let (again, _) = run_with(&m, &sim(vec![1.0; 3]), k, 8, "1:crash@3.5,1:join@7");
    assert_eq!(bits(&again[k].params), bits(&r[k].params));
    assert_eq!(again[k].times, r[k].times);
    assert_eq!(again[1].faults, r[1].faults);
}

#[test]
fn a_worker_down_for_good_is_not_waited_for_and_dylu_follows_the_live_workers() {
    // Worker 0, the fastest, dies at 1.5 s while out: the server carries on
    // with workers 1 and 2, and DyLU's fastest live worker (1) now runs H.
    let (k, m) = (3, async_diloco(4, true));
    let (r, _) = run_with(&m, &sim(vec![2.0, 1.0, 0.5]), k, 6, "0:crash@1.5");
    assert_every_sent_update_applied_once(&r, k);
    assert_eq!(r[0].sent, 0, "its first round (4 steps of 0.5 s) ends at 2 s, after the crash");
    assert_eq!(r[0].faults.len(), 1);
    assert!(r[k].updates[1] > 0 && r[k].updates[2] > 0);
    // Worker 1's later rounds: H = 4 steps, not eq. 6's 2 against a dead faster worker.
    let steps = r[1].optimizer_steps;
    assert!(steps > 2 * r[1].sent, "worker 1 ran {steps} steps for {} updates", r[1].sent);
}

#[test]
fn a_crash_and_a_rejoin_complete_on_threads() {
    // Wall seconds: worker 1 is down from the start until 0.05 s; the run
    // may end before it joins, so only the structure is checked.
    let (k, m) = (2, async_diloco(2, false));
    let (r, _) = run_with(&m, &Runtime::Real(RealSpec::flat(k)), k, 6, "1:crash@0,1:join@0.05");
    assert_eq!(r.len(), k + 1);
    assert_every_sent_update_applied_once(&r, k);
    assert_eq!(r[1].faults.first().map(|f| (f.event.as_str(), f.at_s)), Some(("crash", 0.0)));
    assert!(r[1].faults.iter().skip(1).all(|f| f.event == "join" && f.observed_s >= 0.05));
    assert!(r[k].params.iter().all(|x| x.is_finite()));
    assert!(r[k].updates.iter().sum::<u64>() * 2 >= 12, "t_max = 6 x 2 local steps");
}

#[test]
fn a_worker_that_dies_waiting_in_a_grace_group_leaves_the_group() {
    // A grace period covering everyone: worker 0 (round done at 2 s) waits
    // for the slow worker 2 (4 s) and dies at 3 s while waiting, for good;
    // the group is handed out to workers 1 and 2 only (handing worker 0 a
    // model would leave the server waiting for ever).
    let k = 3;
    let m = Method::AsyncDiloco(AsyncDilocoSettings { h: 2, grace: Some(1e6), ..AsyncDilocoSettings::default() });
    let (r, _) = run_with(&m, &sim(vec![1.0, 1.0, 0.5]), k, 6, "0:crash@3");
    assert_every_sent_update_applied_once(&r, k);
    assert_eq!(r[0].faults[0].observed_s, 3.0, "woken by its crash while waiting for the model");
    assert_eq!((r[0].faults[0].step, r[0].sent), (2, 1), "its first round was sent before it died");
    assert!(r[1].sent > 1 && r[2].sent > 1, "the others carry on: {} {}", r[1].sent, r[2].sent);
}
