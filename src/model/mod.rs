//! The GPT model (GPT-2 or llama blocks): configuration, flat parameter
//! layout, forward/backward.

pub mod activations;
pub mod config;
pub mod device;
mod device_adamw;
pub mod gpt;
pub mod isa;
pub mod layout;
pub mod llama;
pub mod ops;
pub mod profile;
mod random;
#[cfg(test)]
mod tests;
#[cfg(feature = "torch")]
pub mod torch;

pub use config::{Arch, GptConfig};
pub use device::{ComputeDevice, ComputePrecision};
pub use gpt::Gpt;
pub use layout::{ParamLayout, TensorSpec};
