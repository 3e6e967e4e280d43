//! The heterogeneous plan (hetero.rs) against `--runtime sim` with the same
//! speeds: within 5% of the simulated time per round for the methods the
//! slowest worker paces, and between the stated bounds (paced plan below,
//! the proportional estimate above, 5% slack) for the cluster's tokens/s of
//! the methods that compute while communicating.

use super::tests_fixtures::{profile, tiny, workers};
use super::{hetero, plan_method, Costing};
use crate::strategy::{
    run_cluster, Co2Settings, DilocoSettings, DpuSettings, Hooks, LocalSgdSettings, Method, Runtime,
};

const TAU: u64 = 3;
const ROUNDS: u64 = 6;

#[test]
fn heterogeneous_plan_matches_the_simulator_or_its_bounds() {
    let cfg = tiny();
    let layout = crate::model::ParamLayout::new(&cfg);
    let n = layout.len;
    let batch = 2;
    // One slow worker on one tier, and a slow node's worker on two tiers.
    for (name, speeds) in
        [("tcp-4x1-10g.toml", vec![1.0, 1.0, 1.0, 0.5]), ("a100-2x2-10g.toml", vec![1.0, 1.0, 0.4, 1.0])]
    {
        let prof = profile(name);
        let world = prof.workers();
        let spec = prof.sim_spec(&cfg, n, batch * cfg.ctx, speeds.clone()).unwrap();
        let wire = prof.wire.unwrap_or_default();
        let methods = [
            Method::Ddp,
            Method::Zero1,
            Method::LocalSgd(LocalSgdSettings { tau: TAU, ..LocalSgdSettings::default() }),
            Method::Co2(Co2Settings { tau: TAU, ..Co2Settings::default() }),
            Method::Diloco(DilocoSettings { h: TAU, ..DilocoSettings::default() }),
            Method::Dpu(DpuSettings::default()),
            Method::Acco,
        ];
        for method in methods {
            let per = method.local_tau().unwrap_or(1);
            let plan = super::tests_fixtures::sim_plan(ROUNDS * per, wire, &layout);
            let reports =
                run_cluster(&method, &Runtime::Sim(spec.clone()), workers(world, batch), &plan, &Hooks::default())
                    .unwrap();
            // Steady state: rounds 3..=ROUNDS of worker 0's clock; every worker's applied micro-batches in them.
            let end = |round: u64| reports[0].points[(round * per - 1) as usize].end_s;
            let span = end(ROUNDS) - end(2);
            let mbs: u64 = reports
                .iter()
                .flat_map(|r| &r.points[(2 * per) as usize..(ROUNDS * per) as usize])
                .map(|p| p.micro_batches)
                .sum();
            let sim_round = span / (ROUNDS - 2) as f64;
            let sim_tokens = mbs as f64 * (batch * cfg.ctx) as f64 / span;
            let mut c = Costing {
                params: n,
                tokens_per_micro_batch: batch * cfg.ctx,
                spec: spec.clone(),
                wire,
                grad_accum: 1,
                optimizer: plan.optimizer.clone(),
                ..super::hetero::tests::base(world)
            };
            c.spec.speeds = vec![1.0; world];
            hetero::pace(&mut c, &speeds).unwrap();
            let p = plan_method(&method, &c).unwrap();
            let mut even = c.clone();
            even.spec.speeds = vec![1.0; world];
            let paced = plan_method(&method, &even).unwrap().tokens_per_s;
            let at = format!("{method} on {name} with speeds {speeds:?}");
            if p.time.exact {
                let err = (p.time.round_s - sim_round).abs() / sim_round;
                assert!(err < 0.05, "{at}: plan {} s vs sim {sim_round} s per round", p.time.round_s);
            } else {
                assert!(
                    0.95 * paced <= sim_tokens && sim_tokens <= 1.05 * p.tokens_per_s,
                    "{at}: sim {sim_tokens} tokens/s outside [{paced}, {}]",
                    p.tokens_per_s
                );
                assert!(p.tokens_per_s > paced, "{at}: the estimate counts the fast workers' extra micro-batches");
            }
        }
    }
}
