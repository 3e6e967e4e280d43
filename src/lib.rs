//! lowcomm: data-parallel GPT training when the network is the bottleneck.
//!
//! Layers, bottom to top (see shared/DESIGN.md): `model` (GPT on flat f32
//! buffers), `data` (corpus, tokenizer, samplers), `optim` (optimizers on
//! flat slices), `checkpoint`, `train` (the single-worker trainer), `export`.

pub mod bench;
pub mod calibrate;
pub mod checkpoint;
pub mod cli;
pub mod comm;
pub mod data;
pub mod export;
pub mod import;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod plan;
pub mod runtime;
pub mod sample;
pub mod strategy;
pub mod train;
pub mod util;
