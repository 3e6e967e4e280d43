//! What async DiLoCo's server checkpoints and resumes from (issue 10):
//! theta (the part's model piece), the outer optimizer's state (momentum,
//! DN's buffer and count), the inner steps applied (`t_local`), updates per
//! worker, each worker's declared and measured speed (DyLU), and the data shards
//! (sizes, steps per shard, the draw's RNG mid-stream, the rounds handed
//! out). The grace period is closed and no round is out at a checkpoint
//! (`async_diloco.rs` drains first), so neither is saved.
//!
//! Numbers go into the part's JSON scalars; serde_json writes an f64 in its
//! shortest round-trip form, so speeds come back to the bit. The shards go
//! in as one JSON text (their RNG's 128-bit state fits no JSON value).

use super::diloco::{restore_outer, save_outer};
use super::param_server::Speeds;
use super::shards::Shards;
use crate::optim::OuterOpt;
use crate::strategy::journal::StrategyState;
use crate::strategy::worker::ModelPiece;
use anyhow::{Context, Result};

/// The server's counters and shards between updates.
pub struct Progress {
    /// Inner steps applied, all workers (Algorithm 2's `t_local`).
    pub t_local: u64,
    /// Updates applied per worker.
    pub updates: Vec<u64>,
    /// Each worker's speed v(w), declared and measured (DyLU, eq. 6).
    pub speeds: Speeds,
    /// The data shards and their draw.
    pub shards: Shards,
}

impl Progress {
    /// The server's part: theta as its model piece, the outer state, the rest as scalars.
    pub fn save(&self, theta: &[f32], outer: &OuterOpt) -> StrategyState {
        let mut st =
            StrategyState { model: Some(ModelPiece { offset: 0, values: theta.to_vec() }), ..Default::default() };
        save_outer(outer, &mut st, "");
        if let Some(o) = st.scalars.as_object_mut() {
            o.insert("t_local".into(), serde_json::json!(self.t_local));
            o.insert("updates".into(), serde_json::json!(self.updates));
            o.insert("speeds".into(), serde_json::json!(self.speeds));
            // As a JSON text: the RNG's 128-bit state does not fit a JSON value's numbers.
            let shards = serde_json::to_string(&self.shards).expect("shards serialize");
            o.insert("shards".into(), serde_json::Value::String(shards));
        }
        st.optimizer_steps = outer.steps_taken();
        st
    }

    /// Restores what [`Progress::save`] wrote into `theta` and `outer`.
    pub fn restore(st: &StrategyState, theta: &mut [f32], outer: &mut OuterOpt) -> Result<Progress> {
        let piece = st.model.as_ref().context("the server's checkpoint part lacks theta")?;
        anyhow::ensure!(
            piece.values.len() == theta.len(),
            "the server's checkpointed theta has {} values, this run's model {} (a checkpoint of another model?)",
            piece.values.len(),
            theta.len()
        );
        theta.copy_from_slice(&piece.values);
        restore_outer(outer, st, "")?;
        let field = |key: &str| {
            st.scalars.get(key).cloned().with_context(|| format!("the server's checkpoint part lacks `{key}`"))
        };
        let bad = |key: &str| format!("the server's checkpointed `{key}` does not read (saved by another version?)");
        Ok(Progress {
            t_local: st.count("t_local")?,
            updates: serde_json::from_value(field("updates")?).with_context(|| bad("updates"))?,
            speeds: serde_json::from_value(field("speeds")?).with_context(|| bad("speeds"))?,
            shards: serde_json::from_str(field("shards")?.as_str().unwrap_or_default())
                .with_context(|| bad("shards"))?,
        })
    }
}
