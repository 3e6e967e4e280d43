//! The asynchronous Local-SGD paper's methods (shared/papers/async-local-sgd.txt):
//! synchronous DiLoCo and asynchronous DiLoCo with a parameter server,
//! Delayed Nesterov, Dynamic Local Updates, a grace period, eq. 2's shard
//! sampling, and workers that crash and rejoin (`--faults`).
//!
//! ```text
//! diloco.rs          synchronous DiLoCo (Algorithm 1): h inner steps, all-reduce, outer step
//! async_diloco.rs    asynchronous DiLoCo (Algorithm 2): the pseudo-code, the worker side
//! async_server.rs    its parameter server: updates on arrival, rounds handed out in groups
//! param_server.rs    the server's decisions as pure functions: grace, DyLU, eq. 2
//! shards.rs          data shards on the server and their per-shard schedules (eqs. 2-3)
//! server_state.rs    what the server checkpoints and resumes from
//! membership.rs      the fault plan (strategy/faults.rs) injected into the worker and the server
//! streaming.rs       Streaming DiLoCo (arXiv 2501.18512): fragments on their own offsets, overlap, mixing
//! streaming_eager.rs its eager updates (arXiv 2502.12996): a stand-in while the average travels
//! fragments.rs       its fragments: blocks dealt strided or sequential
//! settings.rs        [methods.diloco]
//! streaming_settings.rs  [methods.streaming-diloco]
//! async_settings.rs  [methods.async-diloco]
//! tests/             sync DiLoCo (mod.rs), async DiLoCo, its defaults against sync (defaults.rs), faults
//! ```

pub mod async_diloco;
pub mod async_server;
pub mod async_settings;
// The family is named for its paper's baseline; `diloco.rs` is that method.
#[allow(clippy::module_inception)]
pub mod diloco;
pub mod fragments;
pub mod membership;
pub mod param_server;
pub mod server_state;
pub mod settings;
pub mod shards;
pub mod streaming;
pub mod streaming_eager;
pub mod streaming_settings;

#[cfg(test)]
pub(crate) mod tests;
