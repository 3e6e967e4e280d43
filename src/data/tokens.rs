//! The prepared corpus on disk, and loading it back.
//!
//! A prepared corpus is a directory with:
//! - `tokenizer.json`: the HF tokenizer;
//! - `train.bin`, `val.bin`: token ids as raw little-endian u16 or u32
//!   (nanoGPT-style: trivially readable from numpy with `np.fromfile`);
//! - `meta.json`: [`DatasetMeta`], written last, so its presence means the
//!   other files are complete.

use super::tokenizer::Tokenizer;
use crate::util::atomic_write;
use crate::util::fsio::atomic_write_with;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufWriter, Write};
use std::path::Path;

/// Name of the metadata file in a prepared corpus directory.
pub const META_FILE: &str = "meta.json";
/// Name of the training token file.
pub const TRAIN_FILE: &str = "train.bin";
/// Name of the validation token file.
pub const VAL_FILE: &str = "val.bin";
/// Name of the tokenizer file.
pub const TOKENIZER_FILE: &str = "tokenizer.json";
/// Version of the on-disk layout; bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;

/// Width of a token id on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenDtype {
    /// 2 bytes: every vocabulary up to 65536 tokens (halves disk and I/O).
    U16,
    /// 4 bytes: larger vocabularies.
    U32,
}

impl TokenDtype {
    /// The narrowest dtype that holds every id of a `vocab_size` vocabulary.
    pub fn for_vocab(vocab_size: usize) -> TokenDtype {
        if vocab_size <= 1 << 16 {
            TokenDtype::U16
        } else {
            TokenDtype::U32
        }
    }

    /// Bytes per token.
    pub fn size(self) -> usize {
        match self {
            TokenDtype::U16 => 2,
            TokenDtype::U32 => 4,
        }
    }
}

/// Contents of `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetMeta {
    /// Real vocabulary size of the tokenizer (separator included).
    pub vocab_size: usize,
    /// On-disk width of the token ids.
    pub dtype: TokenDtype,
    /// Number of tokens in `train.bin`.
    pub train_tokens: usize,
    /// Number of tokens in `val.bin`.
    pub val_tokens: usize,
    /// Names of the input documents, in corpus order.
    pub sources: Vec<String>,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
}

impl DatasetMeta {
    /// Write `meta.json` into `dir` atomically.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        atomic_write(&dir.join(META_FILE), json.as_bytes())
    }
}

/// Write token ids to `path` as little-endian `dtype`, atomically.
/// Fails if an id does not fit `dtype`.
pub fn write_tokens(path: &Path, tokens: &[u32], dtype: TokenDtype) -> Result<()> {
    if dtype == TokenDtype::U16 {
        if let Some(&big) = tokens.iter().find(|&&t| t > u16::MAX as u32) {
            bail!("token id {big} does not fit in u16 while writing {}", path.display());
        }
    }
    atomic_write_with(path, |file| {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        for &t in tokens {
            match dtype {
                TokenDtype::U16 => out.write_all(&(t as u16).to_le_bytes())?,
                TokenDtype::U32 => out.write_all(&t.to_le_bytes())?,
            }
        }
        out.flush()?;
        Ok(())
    })
}

/// Read a token file, checking its length against `expected` tokens and
/// every id against `vocab_size`.
pub fn read_tokens(path: &Path, dtype: TokenDtype, expected: usize, vocab_size: usize) -> Result<Vec<u32>> {
    let bytes = std::fs::read(path)
        .with_context(|| format!("cannot read {}: re-run `lowcomm data prepare`", path.display()))?;
    let found = bytes.len() / dtype.size();
    let stray = bytes.len() % dtype.size();
    if stray != 0 || found != expected {
        let stray_note = if stray == 0 { String::new() } else { format!(" and {stray} stray bytes") };
        bail!(
            "{} is truncated or corrupt (expected {expected} tokens, found {found}{stray_note}): re-run `lowcomm data prepare`",
            path.display()
        );
    }
    let tokens: Vec<u32> = match dtype {
        TokenDtype::U16 => bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]]) as u32).collect(),
        TokenDtype::U32 => bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    };
    if let Some((pos, &bad)) = tokens.iter().enumerate().find(|(_, &t)| t as usize >= vocab_size) {
        bail!(
            "{} is corrupt: token {pos} is {bad}, outside the vocabulary of {vocab_size}: re-run `lowcomm data prepare`",
            path.display()
        );
    }
    Ok(tokens)
}

/// A prepared corpus loaded in memory.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// The metadata it was written with.
    pub meta: DatasetMeta,
    /// Training token ids, documents separated by the tokenizer's EOT.
    pub train: Vec<u32>,
    /// Validation token ids, same layout.
    pub val: Vec<u32>,
    /// The tokenizer that produced the ids.
    pub tokenizer: Tokenizer,
}

impl Dataset {
    /// Read only the `meta.json` of a prepared corpus directory.
    pub fn open_meta(dir: &Path) -> Result<DatasetMeta> {
        let meta_path = dir.join(META_FILE);
        let text =
            std::fs::read_to_string(&meta_path).with_context(|| format!("cannot read {}", meta_path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is corrupt", meta_path.display()))
    }

    /// Load and check a prepared corpus directory.
    pub fn open(dir: &Path) -> Result<Dataset> {
        let meta_path = dir.join(META_FILE);
        if !meta_path.is_file() {
            bail!(
                "no prepared corpus at {}: run `lowcomm data prepare --vocab-size N --out {}`",
                dir.display(),
                dir.display()
            );
        }
        let meta_text =
            std::fs::read_to_string(&meta_path).with_context(|| format!("cannot read {}", meta_path.display()))?;
        let meta: DatasetMeta = serde_json::from_str(&meta_text)
            .with_context(|| format!("{} is corrupt: re-run `lowcomm data prepare`", meta_path.display()))?;
        if meta.format_version != FORMAT_VERSION {
            bail!(
                "{} has format version {}, this lowcomm reads {FORMAT_VERSION}: re-run `lowcomm data prepare --force`",
                meta_path.display(),
                meta.format_version
            );
        }
        let tokenizer = Tokenizer::load(&dir.join(TOKENIZER_FILE))?;
        if tokenizer.vocab_size() != meta.vocab_size {
            bail!(
                "{} has {} tokens but {} says {}: the corpus is inconsistent, re-run `lowcomm data prepare --force`",
                dir.join(TOKENIZER_FILE).display(),
                tokenizer.vocab_size(),
                meta_path.display(),
                meta.vocab_size
            );
        }
        let train = read_tokens(&dir.join(TRAIN_FILE), meta.dtype, meta.train_tokens, meta.vocab_size)?;
        let val = read_tokens(&dir.join(VAL_FILE), meta.dtype, meta.val_tokens, meta.vocab_size)?;
        Ok(Dataset { meta, train, val, tokenizer })
    }

    /// Fail unless both splits hold at least one window of `ctx` inputs plus
    /// its shifted target (`ctx + 1` tokens).
    pub fn check_context(&self, ctx: usize) -> Result<()> {
        for (split, tokens) in [("training", &self.train), ("validation", &self.val)] {
            if tokens.len() < ctx + 1 {
                bail!(
                    "the {split} split has only {} tokens, fewer than one context window ({}); use more text or a shorter window (--seq-len N, or [model] ctx in the config)",
                    tokens.len(),
                    ctx + 1
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_is_u16_up_to_65536_tokens() {
        assert_eq!(TokenDtype::for_vocab(4096), TokenDtype::U16);
        assert_eq!(TokenDtype::for_vocab(65536), TokenDtype::U16);
        assert_eq!(TokenDtype::for_vocab(65537), TokenDtype::U32);
    }

    #[test]
    fn token_file_round_trips_little_endian() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.bin");
        write_tokens(&p, &[1, 258, 65535], TokenDtype::U16).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), [1, 0, 2, 1, 255, 255]);
        assert_eq!(read_tokens(&p, TokenDtype::U16, 3, 65536).unwrap(), [1, 258, 65535]);
        write_tokens(&p, &[70000, 3], TokenDtype::U32).unwrap();
        assert_eq!(read_tokens(&p, TokenDtype::U32, 2, 70001).unwrap(), [70000, 3]);
    }

    #[test]
    fn u16_file_rejects_large_ids() {
        let dir = tempfile::tempdir().unwrap();
        assert!(write_tokens(&dir.path().join("t.bin"), &[70000], TokenDtype::U16).is_err());
    }

    #[test]
    fn token_count_mismatch_is_truncated_or_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.bin");
        write_tokens(&p, &[1, 2, 3], TokenDtype::U16).unwrap();
        let err = read_tokens(&p, TokenDtype::U16, 4, 10).unwrap_err().to_string();
        assert!(err.contains("truncated or corrupt") && err.contains("expected 4 tokens, found 3"), "{err}");
    }

    #[test]
    fn token_id_outside_vocab_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.bin");
        write_tokens(&p, &[1, 9, 10], TokenDtype::U16).unwrap();
        let err = read_tokens(&p, TokenDtype::U16, 3, 10).unwrap_err().to_string();
        assert!(err.contains("corrupt") && err.contains("token 2 is 10"), "{err}");
    }

    #[test]
    fn missing_corpus_tells_how_to_prepare_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nothing");
        let err = Dataset::open(&missing).unwrap_err().to_string();
        assert!(err.contains("no prepared corpus") && err.contains("lowcomm data prepare"), "{err}");
    }

    #[test]
    fn meta_json_uses_lowercase_dtype() {
        let meta = DatasetMeta {
            vocab_size: 512,
            dtype: TokenDtype::U16,
            train_tokens: 10,
            val_tokens: 2,
            sources: vec!["a.txt".into()],
            format_version: FORMAT_VERSION,
        };
        let json = serde_json::to_string(&meta).unwrap();
        assert!(json.contains(r#""dtype":"u16""#), "{json}");
        assert_eq!(serde_json::from_str::<DatasetMeta>(&json).unwrap(), meta);
    }
}
