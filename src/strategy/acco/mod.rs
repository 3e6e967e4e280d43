//! The ACCO paper's methods (shared/papers/acco-*.txt): its baselines and
//! ACCO itself, all on the sharded optimizer round of `sharded.rs` except DDP.
//!
//! ```text
//! ddp.rs      every step: all-reduce the gradients, the same step on every replica
//! zero1.rs    DDP + ZeRO-1: reduce-scatter, a step on my shard, all-gather
//! dpu.rs      delayed parameter update: this round's gradients on last round's parameters
//! acco_wp.rs  DPU corrected by weight prediction (ACCO paper, eq. WP)
//! acco.rs     ACCO: two stages per round remove the one-step delay (Algorithm 1)
//! sharded.rs  the sharded round (communication stream) shared by zero1, dpu, acco-wp, acco
//! budget.rs   equal tokens for dpu, acco-wp, acco: a micro-batch budget, the schedule by tokens
//! tests/       the overlapped methods replayed by hand against their update equations;
//!              tests/budget.rs: equal tokens, exactly the budget applied, all together
//! ```

// The family is named for its paper; `acco.rs` is the method of that name.
#[allow(clippy::module_inception)]
pub mod acco;
pub mod acco_wp;
pub mod budget;
pub mod ddp;
pub mod dpu;
pub mod settings;
pub mod sharded;
pub mod zero1;

#[cfg(test)]
mod tests;
