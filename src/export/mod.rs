//! Exports to formats other tools load.

pub mod hf;
pub mod llama;
