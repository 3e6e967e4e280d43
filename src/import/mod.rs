//! Imports from formats other tools write (the inverse of [`crate::export`]).

pub mod hf;
pub mod hf_config;
#[cfg(test)]
mod tests;
