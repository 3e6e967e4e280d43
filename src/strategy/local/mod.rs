//! The CO2 paper's methods (shared/papers/co2.txt): local updates with an
//! outer step every `tau` inner steps, blocking or overlapped. Their shared
//! inner loop is `strategy/inner.rs` (DiLoCo uses it too).
//!
//! ```text
//! local_sgd.rs          tau local steps, then a blocking average (Local-SGD/AdamW)
//! overlap_local_sgd.rs  the average runs behind the next round; workers pull toward an anchor
//! slowmo.rs             the blocking average followed by a slow-momentum outer step
//! co2.rs                CO2 (Algorithm 1): asynchronous all-reduce behind the next inner loop
//! co2_outer.rs          its outer step (lines 11-13): one-round-stale momentum, gap penalty, clip
//! co2_sharded.rs        CO2 with its outer state sharded ZeRO-style (`shard_outer = true`)
//! co2_reference.rs      CO2 as its released code runs it (`mode = "reference"`): blocking average, constant lambda
//! settings.rs           [methods.local-sgd], [methods.overlap-local-sgd], [methods.slowmo]
//! co2_settings.rs       [methods.co2]: its two modes and their defaults
//! tests/                equivalences (ddp, one worker), hand replays; co2.rs: CO2 by hand;
//!                       co2_reference.rs: the released algorithm, and the defaults stay stable; co2_settings.rs
//! ```

pub mod co2;
pub mod co2_outer;
pub mod co2_reference;
pub mod co2_settings;
pub mod co2_sharded;
pub mod local_sgd;
pub mod overlap_local_sgd;
pub mod settings;
pub mod slowmo;

#[cfg(test)]
pub(crate) mod tests;
