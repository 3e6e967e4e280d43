//! The GPT model: configuration, flat parameter layout, forward/backward.

pub mod activations;
pub mod config;
pub mod gpt;
pub mod isa;
pub mod layout;
pub mod ops;
pub mod profile;
#[cfg(test)]
mod tests;

pub use config::GptConfig;
pub use gpt::Gpt;
pub use layout::{ParamLayout, TensorSpec};
