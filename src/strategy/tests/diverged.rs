//! A run whose loss stops being finite ends at once with [`Diverged`], on
//! both runtimes and for every family, and hands no non-finite part to the
//! checkpoint sink.

use super::*;
use super::{plan, sim, workers};
use crate::optim::LrSchedule;
use crate::runtime::real::RealSpec;
use std::sync::Mutex;

/// Keeps every submitted part's round and whether all its values were finite.
#[derive(Default)]
struct Parts(Mutex<Vec<(u64, bool)>>);

impl PartSink for Parts {
    fn submit(&self, part: SavedPart) -> anyhow::Result<()> {
        let finite = part.state.model.iter().flat_map(|m| m.values.iter()).all(|v| v.is_finite())
            && part.state.tensors.iter().all(|(_, t)| t.iter().all(|v| v.is_finite()));
        self.0.lock().unwrap().push((part.round, finite));
        Ok(())
    }
}

fn methods() -> Vec<Method> {
    ["ddp", "acco", "local-sgd", "diloco", "async-diloco", "demo"]
        .iter()
        .map(|m| Method::from_config(m, Some(&"h = 2".parse().unwrap()).filter(|_| m.contains("diloco"))).unwrap())
        .collect()
}

#[test]
fn a_run_at_lr_1e30_stops_with_diverged_and_saves_nothing_non_finite() {
    for method in methods() {
        // Finite for the first rounds (warm-up from 0), then 1e30.
        let p = Plan {
            schedule: LrSchedule { max_lr: 1e30, warmup_steps: 4, total_steps: 12, min_lr: 1e30 },
            ..plan(12, 1, 0.0)
        };
        let parts = Arc::new(Parts::default());
        let hooks = Hooks {
            checkpoints: Checkpointing { every: 1, sink: Some(parts.clone()), stop: None },
            ..Hooks::default()
        };
        for rt in [sim(2), Runtime::Real(RealSpec::flat(2))] {
            let e = run_cluster(&method, &rt, workers(2, 2), &p, &hooks).unwrap_err();
            let d = e.downcast_ref::<Diverged>().unwrap_or_else(|| panic!("{method}: not a divergence: {e:#}"));
            assert!(d.step < 12, "{method}: stopped at step {} of 12", d.step);
            assert!(e.to_string().starts_with("training diverged: participant"), "{e}");
        }
        let parts = parts.0.lock().unwrap();
        assert!(parts.iter().all(|(_, finite)| *finite), "{method}: a non-finite part was submitted: {parts:?}");
    }
}
