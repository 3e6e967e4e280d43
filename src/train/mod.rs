//! Training: configuration, the single-worker loop, data-parallel runs, metrics.

pub mod config;
pub mod duration;
pub mod interrupt;
pub mod lock;
pub mod memory;
pub mod metrics;
pub mod parallel;
pub mod run;
pub mod rundir;
pub mod trainer;
pub mod warm_start;

pub use config::RunConfig;
pub use run::{run, RunOptions, RunSummary};
pub use trainer::Trainer;
