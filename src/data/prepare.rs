//! `lowcomm data prepare`: text files in, a prepared corpus directory out
//! (see [`super::tokens`] for the layout).

use super::corpus::{collect_inputs, split_validation};
use super::gutenberg::{fetch_gutenberg, GUTENBERG_PACKAGE};
use super::tokenizer::Tokenizer;
use super::tokens::{
    write_tokens, DatasetMeta, TokenDtype, FORMAT_VERSION, META_FILE, TOKENIZER_FILE, TRAIN_FILE, VAL_FILE,
};
use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Share of each document held out for validation by default.
pub const DEFAULT_VAL_FRACTION: f64 = 0.05;
/// Default directory where downloaded corpora are cached.
pub const DEFAULT_CACHE_DIR: &str = "data/cache";

/// What to prepare and where.
#[derive(Debug, Clone)]
pub struct PrepareOptions {
    /// Text files or directories; empty means the Gutenberg corpus.
    pub inputs: Vec<PathBuf>,
    /// Output directory of the prepared corpus.
    pub out: PathBuf,
    /// Target vocabulary size (separator and 256 bytes included).
    pub vocab_size: usize,
    /// Share of each document's tail held out for validation (default 0.05).
    pub val_fraction: f64,
    /// Where downloaded corpora are cached.
    pub cache_dir: PathBuf,
    /// Overwrite an existing prepared corpus in `out`.
    pub force: bool,
    /// Tokenize with this tokenizer (`--tokenizer`, e.g. a Hugging Face
    /// model's) instead of training one; `vocab_size` must be its size.
    pub tokenizer: Option<Tokenizer>,
}

impl PrepareOptions {
    /// Options for the Gutenberg corpus with default split and cache.
    pub fn new(out: impl Into<PathBuf>, vocab_size: usize) -> PrepareOptions {
        PrepareOptions {
            inputs: Vec::new(),
            out: out.into(),
            vocab_size,
            val_fraction: DEFAULT_VAL_FRACTION,
            cache_dir: PathBuf::from(DEFAULT_CACHE_DIR),
            force: false,
            tokenizer: None,
        }
    }
}

/// What [`prepare`] produced.
#[derive(Debug, Clone)]
pub struct PrepareReport {
    /// The output directory.
    pub out: PathBuf,
    /// Number of input documents.
    pub documents: usize,
    /// Characters of text in the training split.
    pub train_chars: usize,
    /// Characters of text in the validation split.
    pub val_chars: usize,
    /// Real vocabulary size of the trained tokenizer.
    pub vocab_size: usize,
    /// Tokens in `train.bin`.
    pub train_tokens: usize,
    /// Tokens in `val.bin`.
    pub val_tokens: usize,
    /// Wall-clock time of the whole preparation, in seconds.
    pub elapsed_s: f64,
}

impl fmt::Display for PrepareReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chars = self.train_chars + self.val_chars;
        let tokens = self.train_tokens + self.val_tokens;
        writeln!(f, "prepared corpus in {}", self.out.display())?;
        writeln!(f, "  documents    {}", self.documents)?;
        writeln!(f, "  vocab size   {}", self.vocab_size)?;
        writeln!(f, "  train        {} tokens ({} chars)", self.train_tokens, self.train_chars)?;
        writeln!(f, "  validation   {} tokens ({} chars)", self.val_tokens, self.val_chars)?;
        writeln!(f, "  chars/token  {:.2}", chars as f64 / tokens.max(1) as f64)?;
        write!(f, "  time         {:.1} s", self.elapsed_s)
    }
}

/// Build a prepared corpus: read and split the text, train the tokenizer on
/// the training split only (so validation text is truly unseen), encode,
/// and write `tokenizer.json`, `train.bin`, `val.bin`, then `meta.json`.
pub fn prepare(opts: &PrepareOptions) -> Result<PrepareReport> {
    let started = Instant::now();
    let meta_path = opts.out.join(META_FILE);
    if let Some(t) = opts.tokenizer.as_ref().filter(|t| t.vocab_size() != opts.vocab_size) {
        bail!(
            "vocab size {} disagrees with the given tokenizer's {} tokens: leave --vocab-size out with --tokenizer (the tokenizer sets it), or pass --vocab-size {}",
            opts.vocab_size,
            t.vocab_size(),
            t.vocab_size()
        );
    }
    if !(opts.val_fraction > 0.0 && opts.val_fraction < 1.0) {
        bail!("validation fraction {} must be between 0 and 1 (exclusive)", opts.val_fraction);
    }
    if meta_path.exists() {
        if !opts.force {
            bail!("{} already holds a prepared corpus; pass --force to overwrite", opts.out.display());
        }
        // Remove the old meta first: if we crash below, the directory no
        // longer claims to be a complete corpus with mismatched files.
        std::fs::remove_file(&meta_path).with_context(|| format!("cannot remove {}", meta_path.display()))?;
    }

    let docs = if opts.inputs.is_empty() {
        let mut docs = collect_inputs(&fetch_gutenberg(&opts.cache_dir)?)?;
        // Name books by package, not by cache path, so meta.json is the
        // same on every machine.
        for doc in &mut docs {
            let file = Path::new(&doc.name).file_name().map(|f| f.to_string_lossy().into_owned());
            doc.name = format!("{GUTENBERG_PACKAGE}/{}", file.unwrap_or_default());
        }
        docs
    } else {
        collect_inputs(&opts.inputs)?
    };
    let (train_texts, val_texts) = split_validation(&docs, opts.val_fraction);
    let train_chars: usize = train_texts.iter().map(|t| t.chars().count()).sum();
    let val_chars: usize = val_texts.iter().map(|t| t.chars().count()).sum();
    eprintln!(
        "[{:5.1}s] read {} documents: {train_chars} train chars, {val_chars} validation chars",
        started.elapsed().as_secs_f64(),
        docs.len()
    );

    let tokenizer = match &opts.tokenizer {
        Some(t) => t.clone(),
        None => Tokenizer::train(&train_texts, opts.vocab_size)?,
    };
    if opts.tokenizer.is_none() && tokenizer.vocab_size() < opts.vocab_size {
        eprintln!(
            "warning: the corpus supports only {} tokens of the {} asked for (too few repeated pairs)",
            tokenizer.vocab_size(),
            opts.vocab_size
        );
    }
    let how = if opts.tokenizer.is_some() { "given" } else { "trained" };
    eprintln!("[{:5.1}s] {how} tokenizer: {} tokens", started.elapsed().as_secs_f64(), tokenizer.vocab_size());

    let train = encode_joined(&tokenizer, &train_texts);
    let val = encode_joined(&tokenizer, &val_texts);
    eprintln!(
        "[{:5.1}s] encoded: {} train tokens, {} validation tokens",
        started.elapsed().as_secs_f64(),
        train.len(),
        val.len()
    );

    let meta = DatasetMeta {
        vocab_size: tokenizer.vocab_size(),
        dtype: TokenDtype::for_vocab(tokenizer.vocab_size()),
        train_tokens: train.len(),
        val_tokens: val.len(),
        sources: docs.iter().map(|d| d.name.clone()).collect(),
        format_version: FORMAT_VERSION,
    };
    tokenizer.save(&opts.out.join(TOKENIZER_FILE))?;
    write_tokens(&opts.out.join(TRAIN_FILE), &train, meta.dtype)?;
    write_tokens(&opts.out.join(VAL_FILE), &val, meta.dtype)?;
    meta.save(&opts.out)?; // last: its presence marks a complete corpus
    let elapsed_s = started.elapsed().as_secs_f64();
    eprintln!("[{elapsed_s:5.1}s] wrote {}", opts.out.display());

    Ok(PrepareReport {
        out: opts.out.clone(),
        documents: docs.len(),
        train_chars,
        val_chars,
        vocab_size: meta.vocab_size,
        train_tokens: meta.train_tokens,
        val_tokens: meta.val_tokens,
        elapsed_s,
    })
}

/// Encode texts in parallel (one per document part) and join them with the
/// separator, so a model sees where one document ends and the next begins.
fn encode_joined(tokenizer: &Tokenizer, texts: &[String]) -> Vec<u32> {
    let parts: Vec<Vec<u32>> = texts.par_iter().map(|t| tokenizer.encode(t)).collect();
    let total = parts.iter().map(Vec::len).sum::<usize>() + parts.len().saturating_sub(1);
    let mut joined = Vec::with_capacity(total);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            joined.push(tokenizer.eot_id());
        }
        joined.extend_from_slice(part);
    }
    joined
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tokens::Dataset;
    use std::fs;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-shakespeare-macbeth.txt")
    }

    #[test]
    fn prepare_fixture_then_open_reread_and_detect_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("corpus");
        let mut opts = PrepareOptions::new(&out, 512);
        opts.inputs = vec![fixture()];
        let report = prepare(&opts).unwrap();
        assert!(report.to_string().contains("vocab size   512"), "{report}");

        let ds = Dataset::open(&out).unwrap();
        assert_eq!(ds.meta.vocab_size, 512);
        assert_eq!(ds.meta.dtype, TokenDtype::U16);
        assert_eq!((ds.train.len(), ds.val.len()), (report.train_tokens, report.val_tokens));
        assert_eq!(ds.meta.sources, [fixture().display().to_string()]);
        let val_share = ds.val.len() as f64 / (ds.train.len() + ds.val.len()) as f64;
        assert!((0.02..0.10).contains(&val_share), "validation share {val_share}");
        // One document: no separator inside; the tokens decode to the text.
        assert!(!ds.train.contains(&ds.tokenizer.eot_id()));
        let text = crate::data::read_text(&fixture()).unwrap();
        assert_eq!(ds.tokenizer.decode(&ds.train) + &ds.tokenizer.decode(&ds.val), text);
        ds.check_context(64).unwrap();
        let err = ds.check_context(ds.val.len()).unwrap_err().to_string();
        assert!(err.contains("validation split has only"), "{err}");

        // A second prepare without --force fails and touches nothing.
        let before: Vec<_> = ["meta.json", "train.bin", "val.bin", "tokenizer.json"]
            .iter()
            .map(|f| fs::metadata(out.join(f)).unwrap().modified().unwrap())
            .collect();
        let err = prepare(&opts).unwrap_err().to_string();
        assert!(err.contains("already holds a prepared corpus") && err.contains("--force"), "{err}");
        let after: Vec<_> = ["meta.json", "train.bin", "val.bin", "tokenizer.json"]
            .iter()
            .map(|f| fs::metadata(out.join(f)).unwrap().modified().unwrap())
            .collect();
        assert_eq!(before, after);

        // Truncating train.bin by one byte is detected on open.
        let train_bin = out.join("train.bin");
        let len = fs::metadata(&train_bin).unwrap().len();
        fs::OpenOptions::new().write(true).open(&train_bin).unwrap().set_len(len - 1).unwrap();
        let err = Dataset::open(&out).unwrap_err().to_string();
        assert!(err.contains("train.bin is truncated or corrupt"), "{err}");
        assert!(err.contains(&format!("expected {} tokens", report.train_tokens)), "{err}");
    }

    #[test]
    fn documents_are_joined_with_endoftext() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = dir.path().join("in");
        fs::create_dir_all(&inputs).unwrap();
        let para = "the cat sat on the mat and the dog sat on the log\n\n";
        fs::write(inputs.join("a.txt"), para.repeat(20)).unwrap();
        fs::write(inputs.join("b.txt"), para.repeat(20)).unwrap();
        let mut opts = PrepareOptions::new(dir.path().join("out"), 300);
        opts.inputs = vec![inputs];
        prepare(&opts).unwrap();
        let ds = Dataset::open(&opts.out).unwrap();
        let eot = ds.tokenizer.eot_id();
        assert_eq!(ds.train.iter().filter(|&&t| t == eot).count(), 1);
        assert_eq!(ds.val.iter().filter(|&&t| t == eot).count(), 1);
        // --force rebuilds over an existing corpus.
        opts.force = true;
        prepare(&opts).unwrap();
    }

    #[test]
    fn a_given_tokenizer_gives_the_files_of_the_run_that_trained_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = PrepareOptions::new(dir.path().join("trained"), 300);
        opts.inputs = vec![fixture()];
        prepare(&opts).unwrap();
        let tok = Tokenizer::load_external(&opts.out.join(TOKENIZER_FILE)).unwrap();
        let mut given = PrepareOptions { out: dir.path().join("given"), tokenizer: Some(tok), ..opts.clone() };
        prepare(&given).unwrap();
        for f in [META_FILE, TRAIN_FILE, VAL_FILE, TOKENIZER_FILE] {
            let (a, b) = (fs::read(opts.out.join(f)).unwrap(), fs::read(given.out.join(f)).unwrap());
            assert!(a == b, "{f} differs");
        }
        given.vocab_size = 299;
        given.force = true;
        let e = prepare(&given).unwrap_err().to_string();
        assert!(
            e.contains("vocab size 299 disagrees with the given tokenizer's 300") && e.contains("--vocab-size 300"),
            "{e}"
        );
    }

    #[test]
    fn bad_val_fraction_is_rejected_before_any_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = PrepareOptions::new(dir.path().join("out"), 300);
        opts.inputs = vec![fixture()];
        opts.val_fraction = 1.5;
        assert!(prepare(&opts).unwrap_err().to_string().contains("between 0 and 1"));
        assert!(!opts.out.exists());
    }
}
