//! Run directories a user can trust, through the real binary: `--resume RUN`
//! continues in RUN from any directory (moved or copied too), `--resume`
//! alone continues in --out, `--out` never replaces a run without
//! `--force`, `export` never overwrites, negative numbers get range
//! errors, broken checkpoints are described as they are, `eval` agrees with
//! training, and every command an error suggests works when pasted.

mod common;

use common::*;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn lowcomm(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).current_dir(cwd).output().expect("spawn lowcomm")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Stdout and stderr of a command that must succeed.
#[track_caller]
fn ok(o: Output) -> (String, String) {
    let (out, err) = text(&o);
    assert!(o.status.success(), "lowcomm failed ({}):\nstdout:\n{out}\nstderr:\n{err}", o.status);
    (out, err)
}

/// The one `error: ...` line of a command that must fail with status 1.
#[track_caller]
fn error_line(o: Output) -> String {
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "expected failure:\nstdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<&str> = err.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "expected one error line:\n{err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// A project directory: `data/corpus` (a copy of the shared corpus) and
/// `tiny.toml` with paths relative to it, as a user would write them.
fn project(root: &Path) -> std::path::PathBuf {
    let dir = root.join("project");
    copy_dir(corpus(), &dir.join("data/corpus"));
    let toml = tiny_toml(Path::new("data/corpus"), Path::new("runs/tiny")).replace("max_lr = 1e-2", "max_lr = 3e-3");
    fs::write(dir.join("tiny.toml"), toml).unwrap();
    dir
}

/// The parameters of a run's latest checkpoint, as bits.
fn param_bits(run: &Path) -> Vec<u32> {
    lowcomm::checkpoint::load(run).unwrap().params.iter().map(|x| x.to_bits()).collect()
}

fn train_steps(run: &Path) -> Vec<u64> {
    records(&read_metrics(run), "train").iter().map(|r| r["step"].as_u64().unwrap()).collect()
}

/// The backticked `lowcomm ...` commands in an error message.
fn suggested_commands(msg: &str) -> Vec<String> {
    msg.split('`').skip(1).step_by(2).filter(|c| c.starts_with("lowcomm ")).map(str::to_string).collect()
}

/// Run a suggested command exactly as pasted into a shell in `cwd`.
#[track_caller]
fn run_pasted(cwd: &Path, command: &str) -> (String, String) {
    let bin = env!("CARGO_BIN_EXE_lowcomm");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("lowcomm() {{ '{bin}' \"$@\"; }}; {command}"))
        .current_dir(cwd)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "the suggested command `{command}` failed:\n{out}\n{err}");
    (out, err)
}

#[test]
fn resume_continues_in_the_run_directory_from_anywhere_and_after_a_move_or_copy() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();

    // Uninterrupted, for the bits.
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--out", "runs/whole", "--quiet"]));
    // Half, then resumed from another directory by absolute path.
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--stop-at", "5", "--quiet"]));
    let run = proj.join("runs/tiny");
    let saved = fs::read_to_string(run.join("config.toml")).unwrap();
    // Floats as written; the data directory recorded absolute.
    assert_mentions(
        &saved,
        &["max_lr = 0.003\n", &format!("dir = {:?}", s(&proj.join("data/corpus").canonicalize().unwrap()))],
    );
    let (out, err) = ok(lowcomm(&elsewhere, &["train", "--resume", &s(&run)]));
    assert_mentions(&err, &["resuming", "from step 5", "step-000005"]);
    assert_mentions(&out, &["step 10", "resumed from step 5"]);
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0, "resume wrote into the current directory");
    assert_eq!(train_steps(&run), (1..=10).collect::<Vec<_>>(), "metrics not continued in the run");
    assert_eq!(param_bits(&run), param_bits(&proj.join("runs/whole")), "resumed run differs from uninterrupted one");

    // Moved: resumes in its new place; nothing appears at the old one.
    let moved = tmp.path().join("archive/tiny");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(&run, &moved).unwrap();
    ok(lowcomm(&elsewhere, &["train", "--resume", &s(&moved), "--steps", "12", "--quiet"]));
    assert!(!run.exists(), "resuming a moved run recreated its old directory");
    assert_eq!(train_steps(&moved).last(), Some(&12));

    // Copied over the name of another run: each resumes into itself, and
    // the original is untouched.
    let copy = proj.join("runs/whole-copy");
    copy_dir(&moved, &copy);
    let before = snapshot(&moved);
    ok(lowcomm(&proj, &["train", "--resume", "runs/whole-copy", "--steps", "14", "--quiet"]));
    assert!(before == snapshot(&moved), "resuming a copy modified the original");
    assert_eq!(train_steps(&copy), (1..=14).collect::<Vec<_>>());
    assert_eq!(records(&read_metrics(&proj.join("runs/whole")), "train").len(), 10, "another run's metrics changed");

    // --out naming another directory is refused, not silently followed.
    let line = error_line(lowcomm(&proj, &["train", "--resume", "runs/whole-copy", "--out", "runs/other"]));
    assert_mentions(&line, &["continues in the run's own directory", "runs/whole-copy", "copy its directory"]);

    // `--resume` without a value: the run in --out (it was refused with "a
    // value is required" until the flag became clap's optional value),
    // also as the last argument.
    for args in [&["--out", "runs/whole-copy", "--resume"][..], &["--resume", "--out", "runs/whole-copy"][..]] {
        let steps = train_steps(&copy).len() as u64 + 1;
        ok(lowcomm(&proj, &[&["train", "--steps", &steps.to_string(), "--quiet"][..], args].concat()));
        assert_eq!(train_steps(&copy), (1..=steps).collect::<Vec<_>>(), "{args:?}");
    }
}

#[test]
fn resume_names_a_missing_corpus_and_data_points_it_at_another_copy() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--stop-at", "3", "--quiet"]));
    fs::rename(proj.join("data/corpus"), proj.join("data/moved")).unwrap();
    let line = error_line(lowcomm(&proj, &["train", "--resume", "runs/tiny"]));
    assert_mentions(&line, &["corpus", "is gone", &s(&proj.join("data/corpus")), "--data DIR"]);
    ok(lowcomm(&proj, &["train", "--resume", "runs/tiny", "--data", "data/moved", "--quiet"]));
    // The new location is recorded for the next resume.
    ok(lowcomm(&proj, &["eval", "--ckpt", "runs/tiny"]));
}

#[test]
fn train_out_over_an_existing_run_is_refused_and_force_replaces_it() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--stop-at", "4", "--quiet"]));
    let run = proj.join("runs/tiny");
    let before = snapshot(&run);
    for extra in [&[][..], &["--method", "ddp", "--workers", "2"][..]] {
        let args = [&["train", "--config", "tiny.toml", "--steps", "6", "--quiet"][..], extra].concat();
        let line = error_line(lowcomm(&proj, &args));
        assert_mentions(
            &line,
            &["runs/tiny already holds a run", "step 4 of 10", "step-000004", "--resume", "--force"],
        );
        assert!(before == snapshot(&run), "a refused run modified {extra:?}");
    }
    // --force says what it replaces, and no old checkpoint or metric survives.
    let (_, err) = ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--steps", "2", "--force", "--quiet"]));
    assert_mentions(&err, &["replacing the run in runs/tiny", "step-000004", "metrics.jsonl"]);
    assert_eq!(checkpoint_entries(&run), ["latest", "step-000002"]);
    assert_eq!(train_steps(&run), [1, 2]);
    // Also for data-parallel runs.
    let (_, err) = ok(lowcomm(
        &proj,
        &["train", "--config", "tiny.toml", "--steps", "2", "--method", "ddp", "--workers", "2", "--force", "--quiet"],
    ));
    assert_mentions(&err, &["replacing the run in runs/tiny", "step-000002"]);
    assert_eq!(checkpoint_entries(&run), ["latest", "step-000002"]);
}

#[test]
fn export_refuses_a_non_empty_directory_and_replaces_it_whole_with_force() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--steps", "2", "--quiet"]));
    let hf = proj.join("hf");
    fs::create_dir(&hf).unwrap();
    fs::write(hf.join("config.json"), "{\"mine\": true}").unwrap();
    fs::write(hf.join("stale.bin"), "old").unwrap();
    let before = snapshot(&hf);
    let line = error_line(lowcomm(&proj, &["export", "--ckpt", "runs/tiny", "--hf", "hf"]));
    assert_mentions(&line, &["hf is not empty", "config.json", "stale.bin", "--force"]);
    assert!(before == snapshot(&hf));
    let (_, err) = ok(lowcomm(&proj, &["export", "--ckpt", "runs/tiny", "--hf", "hf", "--force"]));
    assert_mentions(&err, &["replacing hf"]);
    let mut names: Vec<String> = snapshot(&hf).keys().map(|p| s(p)).collect();
    names.sort();
    assert_eq!(names, ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]);
    // A failed export (a damaged model) leaves nothing, not even a temp dir.
    ok(lowcomm(&proj, &["export", "--ckpt", "runs/tiny", "--hf", "fresh"]));
    let ck = proj.join("runs/tiny/checkpoints/step-000002/model.safetensors");
    fs::write(&ck, b"garbage").unwrap();
    error_line(lowcomm(&proj, &["export", "--ckpt", "runs/tiny", "--hf", "other"]));
    let mut left: Vec<String> =
        fs::read_dir(&proj).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["data", "fresh", "hf", "runs", "tiny.toml"]);
}

#[test]
fn negative_numbers_are_parsed_and_get_the_range_error() {
    let tmp = tempdir();
    for (args, needles) in [
        (&["train", "--lr", "-0.001"][..], &["--lr", "must be > 0"][..]),
        (&["train", "--steps", "-3"], &["--steps", "must be at least 1"]),
        (&["generate", "--ckpt", "x", "--temperature", "-1"], &["--temperature", "must be >= 0", "0: greedy"]),
        (&["generate", "--ckpt", "x", "--temperature=-1"], &["--temperature", "must be >= 0"]),
        (&["generate", "--ckpt", "x", "--top-k", "-5"], &["--top-k", "must be >= 0"]),
    ] {
        let o = lowcomm(tmp.path(), args);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{args:?} was accepted");
        assert_mentions(&err, needles);
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

#[test]
fn dangling_or_missing_latest_is_said_as_it_is_with_the_checkpoints_there() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--steps", "2", "--quiet"]));
    let ckdir = proj.join("runs/tiny/checkpoints");
    fs::write(ckdir.join("latest"), "step-000777").unwrap();
    for cmd in [&["eval", "--ckpt", "runs/tiny"][..], &["train", "--resume", "runs/tiny"]] {
        let line = error_line(lowcomm(&proj, cmd));
        assert_mentions(&line, &["step-000777", "does not exist", "checkpoints there: step-000002"]);
        assert!(!line.contains("truncated"), "{line}");
    }
    fs::remove_file(ckdir.join("latest")).unwrap();
    let line = error_line(lowcomm(&proj, &["eval", "--ckpt", "runs/tiny"]));
    assert_mentions(&line, &["no `latest` file", "checkpoints there: step-000002"]);
    // The checkpoint it names works.
    ok(lowcomm(&proj, &["eval", "--ckpt", "runs/tiny/checkpoints/step-000002"]));
}

#[test]
fn eval_and_generate_warn_about_a_damaged_optimizer_file_and_resume_refuses_it() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--steps", "2", "--quiet"]));
    let opt = proj.join("runs/tiny/checkpoints/step-000002/optimizer.safetensors");
    let mut bytes = fs::read(&opt).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    fs::write(&opt, bytes).unwrap();
    for cmd in [&["eval", "--ckpt", "runs/tiny"][..], &["generate", "--ckpt", "runs/tiny", "--tokens", "3"]] {
        let (_, err) = ok(lowcomm(&proj, cmd));
        assert_mentions(&err, &["warning:", "optimizer.safetensors", "cannot be resumed"]);
    }
    let line = error_line(lowcomm(&proj, &["train", "--resume", "runs/tiny", "--steps", "4"]));
    assert_mentions(&line, &["unusable", "optimizer.safetensors"]);
}

#[test]
fn eval_reports_what_training_reported_for_the_same_checkpoint() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    let (out, _) = ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--steps", "3", "--quiet"]));
    let (eval, _) = ok(lowcomm(&proj, &["eval", "--ckpt", "runs/tiny"]));
    let ppl = |t: &str| t[t.find("val_ppl").unwrap()..].split(')').next().unwrap().to_string();
    assert_eq!(ppl(&out), ppl(&eval), "train:\n{out}\neval:\n{eval}");
    assert_mentions(&ppl(&eval), &["(8 windows"]);
}

#[test]
fn every_command_an_error_suggests_works_as_pasted() {
    let tmp = tempdir();
    let proj = project(tmp.path());
    let mut ran = 0;

    // A run over an unfinished run: `--resume` it.
    ok(lowcomm(&proj, &["train", "--config", "tiny.toml", "--stop-at", "2", "--quiet"]));
    let line = error_line(lowcomm(&proj, &["train", "--config", "tiny.toml", "--quiet"]));
    for c in suggested_commands(&line) {
        run_pasted(&proj, &c);
        ran += 1;
    }
    // Over a finished one: train it further.
    let line = error_line(lowcomm(&proj, &["train", "--config", "tiny.toml", "--quiet"]));
    for c in suggested_commands(&line) {
        let (out, _) = run_pasted(&proj, &c);
        assert_mentions(&out, &["step 20"]);
        ran += 1;
    }

    // A vocabulary mismatch: prepare a matching corpus (the error names
    // the directory to pass with --data).
    let toml = fs::read_to_string(proj.join("tiny.toml")).unwrap().replace("vocab_size = 512", "vocab_size = 300");
    fs::write(proj.join("v300.toml"), toml).unwrap();
    let line = error_line(lowcomm(&proj, &["train", "--config", "v300.toml", "--out", "runs/v", "--quiet"]));
    assert_mentions(&line, &["vocabulary mismatch"]);
    for c in suggested_commands(&line) {
        run_pasted(&proj, &c);
        ran += 1;
    }
    let data = line.split("pass --data ").nth(1).unwrap().split([',', ' ']).next().unwrap().to_string();
    ok(lowcomm(
        &proj,
        &["train", "--config", "v300.toml", "--out", "runs/v", "--data", &data, "--steps", "2", "--quiet"],
    ));

    // No prepared corpus: the default corpus' prepare command (its books
    // seeded in the cache, as a first `data prepare` leaves them).
    let books = proj.join("data/cache").join(lowcomm::data::gutenberg::GUTENBERG_DIR);
    fs::create_dir_all(&books).unwrap();
    let text = fs::read_to_string(fixture()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for (i, part) in lines.chunks(lines.len().div_ceil(lowcomm::data::gutenberg::GUTENBERG_BOOKS)).enumerate() {
        fs::write(books.join(format!("book-{i:02}.txt")), part.join("\n")).unwrap();
    }
    let line =
        error_line(lowcomm(&proj, &["train", "--config", "tiny.toml", "--data", "data/none", "--out", "runs/n"]));
    assert_mentions(&line, &["no prepared corpus"]);
    for c in suggested_commands(&line) {
        run_pasted(&proj, &c);
        ran += 1;
    }
    ok(lowcomm(
        &proj,
        &["train", "--config", "tiny.toml", "--data", "data/none", "--out", "runs/n", "--steps", "1", "--quiet"],
    ));
    assert_eq!(ran, 4, "an error stopped suggesting its command");
}
