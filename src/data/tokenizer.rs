//! Byte-level BPE tokenizer (GPT-2 style), trained with HF `tokenizers`.
//!
//! Byte-level means every byte has a token, so any text encodes losslessly
//! and decode(encode(s)) == s. Ids are laid out as:
//! - `0`: `<|endoftext|>`, the document separator (the trainer puts special
//!   tokens first, which gives it a fixed id whatever the vocabulary size);
//! - `1..=256`: the 256 byte tokens;
//! - `257..`: merges, most frequent first.

use crate::util::atomic_write;
use anyhow::{anyhow, bail, Context, Result};
use std::path::Path;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

/// The document separator token of the tokenizers trained here.
pub const EOT_TOKEN: &str = "<|endoftext|>";
/// Separators looked for, in order, in a tokenizer brought from elsewhere
/// (`data prepare --tokenizer`): GPT-2's, Llama-3's, SentencePiece's, Gemma's.
pub const SEPARATORS: [&str; 4] = [EOT_TOKEN, "<|end_of_text|>", "</s>", "<eos>"];
/// Smallest vocabulary: the separator plus the 256 byte tokens.
pub const MIN_VOCAB_SIZE: usize = 257;
/// A merge is learned only for pairs seen at least this often, so a tiny
/// corpus cannot fill the vocabulary with one-off strings.
const MIN_PAIR_FREQUENCY: u64 = 2;

/// A trained byte-level BPE tokenizer.
#[derive(Clone, Debug)]
pub struct Tokenizer {
    /// The HF tokenizer doing the work.
    inner: tokenizers::Tokenizer,
    /// Id of [`EOT_TOKEN`], looked up once.
    eot_id: u32,
}

impl Tokenizer {
    /// Train on in-memory texts towards exactly `vocab_size` tokens (the
    /// separator and the 256 bytes included). A corpus too small to supply
    /// enough pairs seen twice gives fewer; [`Tokenizer::vocab_size`] is
    /// the real size. Deterministic: same texts, same tokenizer.
    pub fn train(texts: &[String], vocab_size: usize) -> Result<Tokenizer> {
        if vocab_size < MIN_VOCAB_SIZE {
            bail!("vocab size {vocab_size} is too small: byte-level BPE needs at least {MIN_VOCAB_SIZE} (256 bytes + {EOT_TOKEN})");
        }
        let byte_level = ByteLevel::default().add_prefix_space(false);
        let mut inner = tokenizers::Tokenizer::new(BPE::default());
        inner.with_pre_tokenizer(Some(byte_level));
        inner.with_decoder(Some(byte_level));
        let trainer = BpeTrainer::builder()
            .vocab_size(vocab_size)
            .min_frequency(MIN_PAIR_FREQUENCY)
            .show_progress(false)
            .special_tokens(vec![AddedToken::from(EOT_TOKEN, true)])
            // All 256 bytes, even those absent from the corpus, so any
            // later text still encodes.
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build();
        let mut trainer = TrainerWrapper::BpeTrainer(trainer);
        inner.train(&mut trainer, texts.iter()).map_err(|e| anyhow!("tokenizer training failed: {e}"))?;
        Self::from_inner(inner).context("trained tokenizer is unusable")
    }

    fn from_inner(inner: tokenizers::Tokenizer) -> Result<Tokenizer> {
        let eot_id = SEPARATORS.iter().find_map(|t| inner.token_to_id(t)).with_context(|| {
            format!("no document separator token (one of {}): add one as a special token", SEPARATORS.join(", "))
        })?;
        Ok(Tokenizer { inner, eot_id })
    }

    /// Token ids of `text`. A literal `<|endoftext|>` in the text becomes
    /// the separator token.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        // Byte-level BPE has no failure case (no unknown token, no
        // truncation configured), so an error here is a library bug.
        let encoding = self.inner.encode_fast(text, false).expect("byte-level BPE encoding cannot fail");
        encoding.get_ids().to_vec()
    }

    /// Text of `ids`. Ids that are not in the vocabulary are skipped; byte
    /// sequences that are not valid UTF-8 (a window cut mid-character)
    /// decode to U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        // The ByteLevel decoder decodes lossily and never errors.
        self.inner.decode(ids, false).expect("byte-level decoding cannot fail")
    }

    /// Number of tokens, the separator included (embedding table size).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Id of the document separator (`<|endoftext|>`, 0 for tokenizers
    /// trained here; the first of [`SEPARATORS`] a brought one has).
    pub fn eot_id(&self) -> u32 {
        self.eot_id
    }

    /// Text of the document separator token.
    pub fn eot_token(&self) -> String {
        self.inner.id_to_token(self.eot_id).unwrap_or_else(|| EOT_TOKEN.to_string())
    }

    /// Load a Hugging Face `tokenizer.json` made elsewhere (`data prepare
    /// --tokenizer`); errors name the file and what it lacks.
    pub fn load_external(path: &Path) -> Result<Tokenizer> {
        let bytes = std::fs::read(path).with_context(|| format!("--tokenizer {}: cannot read it", path.display()))?;
        Self::from_bytes(&bytes)
            .map_err(|e| anyhow!("--tokenizer {}: not a usable Hugging Face tokenizer.json: {e:#}", path.display()))
    }

    /// The tokenizer as `tokenizer.json` text (HF format, loadable by any
    /// HF tokenizers binding).
    pub fn to_json(&self) -> Result<String> {
        self.inner.to_string(true).map_err(|e| anyhow!("cannot serialise tokenizer: {e}"))
    }

    /// Write `tokenizer.json` atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        atomic_write(path, self.to_json()?.as_bytes())
    }

    /// Load a `tokenizer.json` written by [`Tokenizer::save`].
    pub fn load(path: &Path) -> Result<Tokenizer> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read tokenizer {}", path.display()))?;
        Self::from_bytes(&bytes).with_context(|| {
            format!("{} is not a usable tokenizer.json: re-run `lowcomm data prepare`", path.display())
        })
    }

    /// Parse `tokenizer.json` text (e.g. the copy inside a checkpoint).
    pub fn from_json(json: &str) -> Result<Tokenizer> {
        Self::from_bytes(json.as_bytes())
    }

    fn from_bytes(bytes: &[u8]) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| anyhow!("invalid tokenizer JSON ({e})"))?;
        Self::from_inner(inner).context("not a lowcomm tokenizer")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Vec<String> {
        let para = "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs.\n\
                    A café is where a naïve fox drinks coffee and reads the news.\n\n";
        vec![para.repeat(30), "Another document, with other words and other dogs.\n".repeat(20)]
    }

    #[test]
    fn round_trip_is_lossless() {
        let tok = Tokenizer::train(&corpus(), 300).unwrap();
        for s in [
            "plain ASCII text",
            "café naïve façade",
            "emoji 🦀🚀 ok",
            "lines\n\n  indented\r\n\ttab",
            "",
            "<|endoftext|>",
        ] {
            assert_eq!(tok.decode(&tok.encode(s)), s, "round trip of {s:?}");
        }
    }

    #[test]
    fn endoftext_has_id_zero_and_is_one_token() {
        let tok = Tokenizer::train(&corpus(), 300).unwrap();
        assert_eq!(tok.eot_id(), 0);
        assert_eq!(tok.encode("a<|endoftext|>b").iter().filter(|&&t| t == 0).count(), 1);
    }

    #[test]
    fn vocab_size_is_respected() {
        let tok = Tokenizer::train(&corpus(), 300).unwrap();
        assert_eq!(tok.vocab_size(), 300);
        let max_id = tok.encode(&corpus()[0]).into_iter().max().unwrap();
        assert!((max_id as usize) < 300);
        // Merges make the corpus shorter than its bytes.
        let (tokens, bytes) = (tok.encode(&corpus()[0]).len(), corpus()[0].len());
        assert!(tokens * 10 < bytes * 7, "{tokens} tokens for {bytes} bytes");
    }

    #[test]
    fn too_small_vocab_is_rejected() {
        let err = Tokenizer::train(&corpus(), 256).unwrap_err().to_string();
        assert!(err.contains("at least 257"), "{err}");
    }

    #[test]
    fn training_is_deterministic() {
        let a = Tokenizer::train(&corpus(), 320).unwrap().to_json().unwrap();
        let b = Tokenizer::train(&corpus(), 320).unwrap().to_json().unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn save_and_load_give_the_same_tokenizer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        let tok = Tokenizer::train(&corpus(), 300).unwrap();
        tok.save(&path).unwrap();
        let loaded = Tokenizer::load(&path).unwrap();
        let text = "the lazy fox drinks café";
        assert_eq!(loaded.encode(text), tok.encode(text));
        assert_eq!(loaded.vocab_size(), tok.vocab_size());
    }

    /// A hand-written word-level tokenizer.json with vocabulary `words`.
    fn word_level(words: &[&str]) -> String {
        let vocab: Vec<String> = words.iter().enumerate().map(|(i, w)| format!("\"{w}\": {i}")).collect();
        format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
               "pre_tokenizer":{{"type":"Whitespace"}},"post_processor":null,"decoder":null,
               "model":{{"type":"WordLevel","vocab":{{{}}},"unk_token":"[UNK]"}}}}"#,
            vocab.join(",")
        )
    }

    #[test]
    fn a_brought_tokenizer_separates_documents_with_its_own_end_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, word_level(&["[UNK]", "a", "b", "</s>"])).unwrap();
        let tok = Tokenizer::load_external(&path).unwrap();
        assert_eq!((tok.eot_id(), tok.eot_token().as_str(), tok.vocab_size()), (3, "</s>", 4));
        assert_eq!(tok.encode("b a"), [2, 1]);
        std::fs::write(&path, word_level(&["[UNK]", "a", "b"])).unwrap();
        let e = format!("{:#}", Tokenizer::load_external(&path).unwrap_err());
        assert!(e.contains("--tokenizer") && e.contains("no document separator") && e.contains("</s>"), "{e}");
    }

    #[test]
    fn corrupt_tokenizer_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokenizer.json");
        std::fs::write(&path, "{ not json").unwrap();
        let err = Tokenizer::load(&path).unwrap_err().to_string();
        assert!(err.contains("tokenizer.json") && err.contains("not a usable"), "{err}");
        let err = format!("{:#}", Tokenizer::load(&dir.path().join("missing.json")).unwrap_err());
        assert!(err.contains("missing.json"), "{err}");
    }
}
