//! Hand-written kernels of the GPT and llama forward and backward on flat f32 slices.
//!
//! Why by hand and not candle: see docs/decisions.md. Every kernel has a
//! test with numbers checkable by hand and a finite-difference check.

pub mod attention;
pub mod embedding;
pub mod fastmath;
pub mod gelu;
#[cfg(test)]
pub mod gradcheck;
pub mod layernorm;
pub mod matmul;
pub mod reduce;
pub mod residual;
pub mod rmsnorm;
pub mod rope;
pub mod simd;
pub mod swiglu;
pub mod xent;
