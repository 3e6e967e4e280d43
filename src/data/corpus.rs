//! Reading text corpora and splitting them into train / validation.
//!
//! Real-world text files come in mixed encodings (Project Gutenberg ships
//! both UTF-8 and Latin-1) and mixed line endings; everything is normalised
//! here so that later steps (tokenizer, token files) see one clean form.

use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// One input text, kept whole so the validation split can take its tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Where the text came from (the file path as given or found), for
    /// reports and `meta.json`.
    pub name: String,
    /// The decoded text, with `\n` line endings only.
    pub text: String,
}

/// Extensions taken when walking a directory; files without an extension
/// are taken too (Gutenberg-style `README`-less dumps often have none).
const TEXT_EXTENSIONS: [&str; 3] = ["txt", "md", "text"];

/// Read a text file: UTF-8 if valid, else Latin-1; CRLF and lone CR become LF.
///
/// A file with a NUL byte is rejected: no text encoding we accept produces
/// NUL, so it is almost surely a binary file passed by mistake.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    match decode_text(&bytes) {
        Some(text) => Ok(text),
        None => bail!("{} looks binary; pass text files only", path.display()),
    }
}

/// Decode bytes as text (see [`read_text`]); `None` when they contain NUL.
fn decode_text(bytes: &[u8]) -> Option<String> {
    if bytes.contains(&0) {
        return None;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(s) => s.to_owned(),
        // Latin-1 maps each byte to the code point of the same value, so it
        // can decode any byte string; it is the right guess for old texts.
        Err(_) => bytes.iter().map(|&b| char::from(b)).collect(),
    };
    Some(normalize_newlines(&text))
}

/// Turn `\r\n` and lone `\r` (old Mac files) into `\n`.
fn normalize_newlines(text: &str) -> String {
    if !text.contains('\r') {
        return text.to_owned();
    }
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// Read every input path (file, or directory walked recursively) into
/// documents, in a deterministic order.
///
/// In directories, hidden entries are skipped and only regular files ending
/// in `.txt`, `.md`, `.text` or with no extension are taken; a file named
/// explicitly is always taken. Whitespace-only documents are dropped.
pub fn collect_inputs(paths: &[PathBuf]) -> Result<Vec<Document>> {
    let mut files = Vec::new();
    for path in paths {
        let meta = fs::metadata(path).with_context(|| {
            format!("input {} does not exist: pass --input with existing .txt files or directories", path.display())
        })?;
        if meta.is_dir() {
            walk_dir(path, &mut files)?;
        } else {
            files.push(path.clone());
        }
    }
    let mut docs = Vec::with_capacity(files.len());
    for file in files {
        let text = read_text(&file)?;
        if !text.trim().is_empty() {
            docs.push(Document { name: file.display().to_string(), text });
        }
    }
    if docs.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        bail!("no text found in {}: pass --input with .txt files or directories", shown.join(", "));
    }
    Ok(docs)
}

/// Append the text files under `dir` to `out`, sorted by path.
fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot list {}", dir.display()))?;
    // read_dir order depends on the filesystem; sorting makes the corpus,
    // and hence the tokenizer and token files, reproducible.
    entries.sort();
    for path in entries {
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if hidden {
            continue;
        }
        // symlink_metadata: do not follow directory symlinks (loops);
        // metadata: a symlink to a regular file is still taken.
        let link_meta = fs::symlink_metadata(&path)?;
        if link_meta.is_dir() {
            walk_dir(&path, out)?;
        } else if fs::metadata(&path).is_ok_and(|m| m.is_file()) && has_text_extension(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn has_text_extension(path: &Path) -> bool {
    match path.extension() {
        None => true,
        Some(ext) => TEXT_EXTENSIONS.iter().any(|t| ext.eq_ignore_ascii_case(t)),
    }
}

/// Split documents into (train_texts, val_texts) at paragraph boundaries.
///
/// For each document with at least two paragraphs (separated by blank
/// lines), the trailing paragraphs whose size is closest to `val_fraction`
/// of the document (in bytes) go to validation; at least one paragraph stays
/// on each side. Single-paragraph documents stay in train. If that leaves
/// validation empty, the last document is cut at the line boundary nearest
/// to `1 - val_fraction` of its length, so validation is never empty.
/// Deterministic: same documents, same split.
pub fn split_validation(docs: &[Document], val_fraction: f64) -> (Vec<String>, Vec<String>) {
    let mut train = Vec::with_capacity(docs.len());
    let mut val = Vec::new();
    for doc in docs {
        let target = cut_target(&doc.text, val_fraction);
        match nearest(&paragraph_starts(&doc.text), target) {
            Some(cut) => {
                train.push(doc.text[..cut].to_owned());
                val.push(doc.text[cut..].to_owned());
            }
            None => train.push(doc.text.clone()),
        }
    }
    if val.is_empty() {
        fallback_line_split(docs, val_fraction, &mut train, &mut val);
    }
    (train, val)
}

/// Byte offset where validation should ideally begin.
fn cut_target(text: &str, val_fraction: f64) -> usize {
    let keep = (1.0 - val_fraction).clamp(0.0, 1.0);
    (text.len() as f64 * keep).round() as usize
}

/// Byte offsets where the 2nd, 3rd, ... paragraphs begin: the start of a
/// non-blank line that follows at least one blank (whitespace-only) line,
/// with some non-blank line before it.
fn paragraph_starts(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut seen_text = false;
    let mut after_blank = false;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            after_blank = true;
        } else {
            if seen_text && after_blank {
                starts.push(offset);
            }
            seen_text = true;
            after_blank = false;
        }
        offset += line.len();
    }
    starts
}

/// The candidate closest to `target` (ties go to the earlier one).
fn nearest(candidates: &[usize], target: usize) -> Option<usize> {
    candidates.iter().copied().min_by_key(|&c| c.abs_diff(target))
}

/// When no document has two paragraphs: cut the last document at a line
/// boundary (or, for a one-line text, a char boundary) near the target.
fn fallback_line_split(docs: &[Document], val_fraction: f64, train: &mut [String], val: &mut Vec<String>) {
    let Some(last) = docs.len().checked_sub(1) else { return };
    let text = &docs[last].text;
    let target = cut_target(text, val_fraction);
    let line_cuts: Vec<usize> = text.match_indices('\n').map(|(i, _)| i + 1).filter(|&i| i < text.len()).collect();
    let cut = nearest(&line_cuts, target).unwrap_or_else(|| {
        // Keep both sides non-empty when there are two chars or more.
        let char_cuts: Vec<usize> = text.char_indices().map(|(i, _)| i).filter(|&i| i > 0).collect();
        nearest(&char_cuts, target).unwrap_or(0)
    });
    train[last] = text[..cut].to_owned();
    val.push(text[cut..].to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Document {
        Document { name: "t".into(), text: text.into() }
    }

    #[test]
    fn utf8_file_is_kept_as_is() {
        assert_eq!(decode_text("café ☃".as_bytes()).unwrap(), "café ☃");
    }

    #[test]
    fn latin1_file_is_decoded() {
        // "café naïve" in Latin-1: é = 0xE9, ï = 0xEF (invalid as UTF-8).
        let bytes = b"caf\xe9 na\xefve";
        assert_eq!(decode_text(bytes).unwrap(), "café naïve");
    }

    #[test]
    fn crlf_becomes_lf() {
        assert_eq!(decode_text(b"a\r\nb\r\n\r\nc").unwrap(), "a\nb\n\nc");
    }

    #[test]
    fn lone_cr_becomes_lf() {
        assert_eq!(decode_text(b"a\rb\r\rc").unwrap(), "a\nb\n\nc");
    }

    #[test]
    fn binary_file_is_rejected_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("blob.txt");
        fs::write(&p, b"abc\0def").unwrap();
        let err = read_text(&p).unwrap_err().to_string();
        assert!(err.contains("blob.txt") && err.contains("looks binary"), "{err}");
    }

    #[test]
    fn directory_walk_is_sorted_and_skips_hidden_and_other_extensions() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::create_dir_all(d.join("sub")).unwrap();
        fs::create_dir_all(d.join(".git")).unwrap();
        fs::write(d.join("b.txt"), "bee").unwrap();
        fs::write(d.join("a.md"), "ay").unwrap();
        fs::write(d.join("sub/c"), "sea").unwrap();
        fs::write(d.join(".hidden.txt"), "no").unwrap();
        fs::write(d.join(".git/x.txt"), "no").unwrap();
        fs::write(d.join("image.png"), "no").unwrap();
        fs::write(d.join("empty.txt"), "  \n").unwrap();
        let docs = collect_inputs(&[d.to_path_buf()]).unwrap();
        let texts: Vec<&str> = docs.iter().map(|x| x.text.as_str()).collect();
        assert_eq!(texts, ["ay", "bee", "sea"]);
    }

    #[test]
    fn missing_input_is_a_clear_error() {
        let err = collect_inputs(&[PathBuf::from("/no/such/place.txt")]).unwrap_err().to_string();
        assert!(err.contains("/no/such/place.txt") && err.contains("--input"), "{err}");
    }

    #[test]
    fn directory_without_text_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("only.png"), "x").unwrap();
        let err = collect_inputs(&[dir.path().to_path_buf()]).unwrap_err().to_string();
        assert!(err.contains("no text found") && err.contains("--input"), "{err}");
    }

    #[test]
    fn validation_split_is_at_paragraph_boundary() {
        // Ten paragraphs of 20 bytes each; 10% should be the last one.
        let text: String = (0..10).map(|i| format!("paragraph number {i}\n\n")).collect();
        let (train, val) = split_validation(&[doc(&text)], 0.1);
        assert_eq!(val, ["paragraph number 9\n\n"]);
        assert_eq!(format!("{}{}", train[0], val[0]), text);
        assert!(train[0].ends_with("\n\n"));
    }

    #[test]
    fn multi_paragraph_doc_gives_at_least_one_paragraph_to_validation() {
        let text = "a long first paragraph that is most of the text\n\n\nend\n";
        let (train, val) = split_validation(&[doc(text)], 0.001);
        assert_eq!(val, ["end\n"]);
        assert_eq!(train, ["a long first paragraph that is most of the text\n\n\n"]);
    }

    #[test]
    fn single_paragraph_doc_stays_in_train_when_others_give_validation() {
        let docs = [doc("one block\nstill the same block\n"), doc("first\n\nsecond\n")];
        let (train, val) = split_validation(&docs, 0.05);
        assert_eq!(train, ["one block\nstill the same block\n", "first\n\n"]);
        assert_eq!(val, ["second\n"]);
    }

    #[test]
    fn validation_is_never_empty_for_single_paragraph_corpus() {
        let text: String = (0..20).map(|i| format!("line {i:02}\n")).collect();
        let (train, val) = split_validation(&[doc(&text)], 0.1);
        assert_eq!(val, ["line 18\nline 19\n"]);
        assert_eq!(format!("{}{}", train[0], val[0]), text);
        // A single line is cut at a char boundary, still leaving both sides.
        let (train, val) = split_validation(&[doc("héllo wörld")], 0.5);
        assert!(!train[0].is_empty() && !val[0].is_empty());
        assert_eq!(format!("{}{}", train[0], val[0]), "héllo wörld");
    }
}
