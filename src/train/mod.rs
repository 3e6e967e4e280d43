//! Single-worker training: configuration, the loop, metrics.

pub mod config;
pub mod metrics;
pub mod parallel;
#[cfg(feature = "mpi")]
pub mod parallel_mpi;
pub mod run;
pub mod rundir;
pub mod trainer;

pub use config::RunConfig;
pub use run::{run, RunOptions, RunSummary};
pub use trainer::Trainer;
