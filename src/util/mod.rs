//! Small helpers shared by every layer: atomic file writes, hashing.

pub mod fsio;

pub use fsio::{atomic_write, sha256_file, sha256_hex};
