use super::*;

#[test]
fn shell_quote_leaves_plain_paths_and_quotes_the_rest() {
    assert_eq!(shell_quote("runs/nano"), "runs/nano");
    assert_eq!(shell_quote("my runs/it's"), r"'my runs/it'\''s'");
    assert_eq!(shell_quote(""), "''");
}

#[test]
fn legacy_relative_paths_resolve_from_where_the_run_was_started() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    fs::create_dir_all(root.join("data/corpus")).unwrap();
    fs::create_dir_all(root.join("runs/nano")).unwrap();
    let got = resolve_legacy(Path::new("data/corpus"), &root.join("runs/nano"), Path::new("runs/nano"));
    assert_eq!(got, absolute(&root.join("data/corpus")));
    // A moved run no longer tells where it was started: the current
    // directory's path is kept (and the error names it).
    let got = resolve_legacy(Path::new("data/corpus"), &root.join("archive/nano"), Path::new("runs/nano"));
    assert_eq!(got, absolute(Path::new("data/corpus")));
}

#[test]
fn a_directory_without_run_files_is_not_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    assert!(inspect(tmp.path()).is_none());
    assert!(check_fresh(tmp.path(), false).unwrap().is_none());
    fs::write(tmp.path().join("metrics.jsonl"), "{\"step\":3}\n").unwrap();
    let run = inspect(tmp.path()).unwrap();
    assert_eq!(run.metrics, Some((1, Some(3))));
    let e = check_fresh(tmp.path(), false).unwrap_err().to_string();
    assert!(e.contains("--force") && e.contains("no checkpoint") && e.contains("to step 3"), "{e}");
    claim_fresh(tmp.path(), true).unwrap();
    assert!(inspect(tmp.path()).is_none());
    assert!(tmp.path().join("notes.txt").is_file(), "--force removed a file that is not the run's");
}
