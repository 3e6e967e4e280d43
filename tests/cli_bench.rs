//! `lowcomm bench`: flags are checked before anything is measured; a flag
//! of one `--what` given to another is refused, not ignored.

use std::process::{Command, Output};

fn lowcomm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lowcomm")).args(args).output().expect("spawn lowcomm")
}

#[test]
fn bench_refuses_zero_steps_and_flags_of_another_what() {
    // --steps 0 ran one step (and --what sim printed steps=0); --mib,
    // --backend and --breakdown were silently ignored by the other --what.
    let cases: [(&[&str], &str); 8] = [
        (&["--steps", "0"], "must be at least 1"),
        // --warmup was ignored by comm and sim, which take no warm-up steps.
        (&["--what", "comm", "--warmup", "1"], "--warmup applies to --what step, dct and server, not to --what comm"),
        (&["--what", "sim", "--warmup", "0"], "--warmup applies to --what step, dct and server, not to --what sim"),
        (&["--what", "sim", "--mib", "1"], "--mib applies to --what comm only, not to --what sim"),
        (
            &["--what", "sim-parallel", "--warmup", "1"],
            "--warmup applies to --what step, dct and server, not to --what sim-parallel",
        ),
        (&["--what", "step", "--backend", "mpi"], "--backend applies to --what comm only"),
        (&["--what", "comm", "--breakdown"], "--breakdown applies to --what step only, not to --what comm"),
        (&["--what", "comm", "--mib", "0"], "must be at least 1"),
    ];
    for (args, says) in cases {
        let out = lowcomm(&[&["bench"], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} measured something: {}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn bench_comm_reports_the_size_it_was_given() {
    // The RESULT line said 64MiB whatever --mib was (and moved 64 MiB).
    let out = lowcomm(&["bench", "--what", "comm", "--mib", "1", "--steps", "1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("RESULT all_reduce 1MiB workers=2") && !text.contains("64MiB"), "{text}");
}

#[test]
fn bench_help_names_every_preset_it_takes() {
    let out = lowcomm(&["bench", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("nano (32 x 64), micro (16 x 128), small (8 x 256) or gpt2 (2 x 1024)"), "{help}");
}
