//! Imports from formats other tools write (the inverse of [`crate::export`]).

pub mod hf;
pub mod hf_config;
pub mod hf_llama;
#[cfg(test)]
mod tests;
