//! Value parsers for numeric flags: each accepts any number, negative ones
//! included (the flags also set `allow_negative_numbers`, so `--lr -0.001`
//! reaches the parser instead of being taken for a flag `-0`), and rejects
//! what is out of range with the range and what the bounds mean. Whole
//! numbers stop at 2^63 - 1, the most a run's config.toml (TOML) holds; and
//! [`Utf8Path`] refuses a path that config.toml could not record.

use std::ffi::OsStr;
use std::path::PathBuf;

/// The largest whole number a flag takes: TOML's integers are i64.
pub const MAX_WHOLE: u64 = i64::MAX as u64;

/// A whole number `>= min` (and at most [`MAX_WHOLE`]), or the range error.
fn whole<T: TryFrom<u64>>(s: &str, min: u64, meaning: &str) -> Result<T, String> {
    let range = || if min == 0 { format!("must be >= 0{meaning}") } else { format!("must be at least {min}{meaning}") };
    let v: i128 = s.trim().parse().map_err(|_| format!("`{s}` is not a whole number; it {}", range()))?;
    if v < min as i128 {
        return Err(range());
    }
    if v > MAX_WHOLE as i128 {
        return Err(format!(
            "{s} is too large: must be at most {MAX_WHOLE} (2^63 - 1, the largest whole number a run's config.toml can hold)"
        ));
    }
    u64::try_from(v).ok().and_then(|v| T::try_from(v).ok()).ok_or_else(|| format!("{s} is too large for this machine"))
}

/// A path a run records in its config.toml (`--out`, `--data`, ...): TOML
/// holds UTF-8 text only, so a path that is not valid UTF-8 is refused here,
/// naming the flag, instead of panicking when the config is saved.
#[derive(Clone, Copy, Debug)]
pub struct Utf8Path;

impl clap::builder::TypedValueParser for Utf8Path {
    type Value = PathBuf;

    fn parse_ref(&self, _: &clap::Command, arg: Option<&clap::Arg>, value: &OsStr) -> Result<PathBuf, clap::Error> {
        if value.to_str().is_some() {
            return Ok(PathBuf::from(value));
        }
        let flag = arg.and_then(|a| a.get_long()).map_or("a path flag".to_string(), |l| format!("--{l}"));
        Err(clap::Error::raw(
            clap::error::ErrorKind::ValueValidation,
            format!(
                "{flag} {}: path contains invalid UTF-8; a run records its paths in config.toml, which holds UTF-8 text only: use a path that is valid UTF-8\n",
                value.to_string_lossy()
            ),
        ))
    }
}

/// A whole number >= 0.
pub fn count_u64(s: &str) -> Result<u64, String> {
    whole(s, 0, "")
}

/// A whole number >= 0.
pub fn count_usize(s: &str) -> Result<usize, String> {
    whole(s, 0, "")
}

/// A whole number >= 1.
pub fn positive_u64(s: &str) -> Result<u64, String> {
    whole(s, 1, "")
}

/// A whole number >= 1.
pub fn positive_usize(s: &str) -> Result<usize, String> {
    whole(s, 1, "")
}

/// `--top-k`: >= 0, where 0 means no cut-off.
pub fn top_k(s: &str) -> Result<usize, String> {
    whole(s, 0, " (0: sample among all tokens)")
}

fn number(s: &str) -> Result<f64, String> {
    let v: f64 = s.trim().parse().map_err(|_| format!("`{s}` is not a number"))?;
    if !v.is_finite() {
        return Err("must be a finite number".into());
    }
    Ok(v)
}

/// A learning rate: a number > 0.
pub fn learning_rate(s: &str) -> Result<f32, String> {
    let v = number(s)?;
    if v <= 0.0 {
        return Err("must be > 0 (the peak learning rate, e.g. 3e-3)".into());
    }
    Ok(v as f32)
}

/// `--temperature`: >= 0, where 0 means greedy decoding.
pub fn temperature(s: &str) -> Result<f32, String> {
    let v = number(s)?;
    if v < 0.0 {
        return Err("must be >= 0 (0: greedy, always the most likely token; 1: the model's distribution)".into());
    }
    Ok(v as f32)
}

/// Any finite number (range checked where its meaning is known).
pub fn finite_f64(s: &str) -> Result<f64, String> {
    number(s)
}

/// `--loss-slack`: nats of validation loss, >= 0.
pub fn loss_slack(s: &str) -> Result<f64, String> {
    let v = number(s)?;
    if v < 0.0 {
        return Err("must be >= 0 (nats of validation loss above the best; 0: the best loss wins)".into());
    }
    Ok(v)
}

/// `on` or `off`.
pub fn on_off(s: &str) -> Result<bool, String> {
    match s.trim() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err("must be on or off".into()),
    }
}

/// `--outer-clip`: a threshold, or off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ClipArg {
    /// Clip at this threshold.
    Phi(f64),
    /// No clipping.
    Off,
}

/// A clipping threshold > 0, or `off`.
pub fn clip_or_off(s: &str) -> Result<ClipArg, String> {
    if s.trim() == "off" {
        return Ok(ClipArg::Off);
    }
    match number(s) {
        Ok(v) if v > 0.0 => Ok(ClipArg::Phi(v)),
        _ => Err("must be a number > 0 (e.g. 0.1) or off".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Cli;
    use clap::{error::ErrorKind, CommandFactory};

    /// `train --method`'s help names every method there is (it once
    /// stopped at flexdemo, leaving out diloco and async-diloco).
    #[test]
    fn train_help_lists_every_method() {
        let cmd = Cli::command();
        let train = cmd.find_subcommand("train").unwrap();
        let arg = train.get_arguments().find(|a| a.get_long() == Some("method")).unwrap();
        let help = arg.get_help().unwrap().to_string();
        let listed: Vec<&str> = help.split(':').nth(1).unwrap().split([',', '.']).map(str::trim).collect();
        for name in crate::strategy::Method::NAMES {
            assert!(listed.contains(&name), "--method's help leaves out {name}: {help}");
        }
    }

    /// Every numeric flag of every command, given `-1`, reaches its parser:
    /// the error is a range error (or the value is accepted), never
    /// "unexpected argument '-1'". A numeric flag is one that refuses `abc`.
    #[test]
    fn every_numeric_flag_accepts_negative_numbers_and_gives_the_range() {
        let root = Cli::command();
        let mut checked = Vec::new();
        let mut subs: Vec<Vec<&clap::Command>> = vec![vec![&root]];
        while let Some(path) = subs.pop() {
            let cmd = *path.last().unwrap();
            for sub in cmd.get_subcommands() {
                let mut p = path.clone();
                p.push(sub);
                subs.push(p);
            }
            let names: Vec<&str> = path[1..].iter().map(|c| c.get_name()).collect();
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                // A flag with a fixed list of values (--budget rounds|tokens) is not
                // numeric, nor --device (names: native, cpu, cuda, cuda:N).
                if !arg.get_action().takes_values() || !arg.get_possible_values().is_empty() || long == "device" {
                    continue;
                }
                let try_value = |v: &str| {
                    let mut argv = vec!["lowcomm"];
                    argv.extend(&names);
                    let flag = format!("--{long}");
                    argv.extend([flag.as_str(), v]);
                    Cli::command().try_get_matches_from(argv).map(|_| ()).map_err(|e| (e.kind(), e.to_string()))
                };
                let numeric =
                    matches!(try_value("abc"), Err((ErrorKind::ValueValidation | ErrorKind::InvalidValue, _)));
                if !numeric {
                    continue;
                }
                // Values are parsed as they come; a missing required flag
                // (--ckpt) is only reported after, so it means "accepted".
                match try_value("-1") {
                    Ok(()) | Err((ErrorKind::MissingRequiredArgument, _)) => {}
                    Err((ErrorKind::ValueValidation, msg)) => {
                        assert!(msg.contains("must be"), "{names:?} --{long} -1: {msg}")
                    }
                    Err((kind, msg)) => panic!("{names:?} --{long} -1 is refused as {kind:?}, not by range: {msg}"),
                }
                checked.push(format!("{} --{long}", names.join(" ")));
            }
        }
        for must in ["train --lr", "train --steps", "generate --temperature", "generate --top-k", "eval --windows"] {
            assert!(checked.iter().any(|c| c == must), "{must} was not checked: {checked:?}");
        }
    }

    /// Every whole-number flag stops at 2^63 - 1 (it ends up in config.toml,
    /// whose integers are i64: `--steps 2^63` panicked there, after the run
    /// directory was created).
    #[test]
    fn whole_numbers_stop_at_what_toml_holds() {
        assert_eq!(super::count_u64("9223372036854775807"), Ok(i64::MAX as u64));
        for too_big in ["9223372036854775808", "18446744073709551615", "99999999999999999999999"] {
            let e = super::count_u64(too_big).unwrap_err();
            assert!(e.contains("must be at most 9223372036854775807") && e.contains("config.toml"), "{e}");
            assert!(super::positive_usize(too_big).unwrap_err().contains("at most"));
        }
        for flag in ["--steps", "--seed", "--eval-every", "--checkpoint-every", "--tau", "--batch-size", "--workers"] {
            let e = Cli::command()
                .try_get_matches_from(["lowcomm", "train", flag, "9223372036854775808"])
                .unwrap_err()
                .to_string();
            assert!(e.contains("must be at most 9223372036854775807"), "{flag}: {e}");
        }
    }

    /// A path flag that the run records refuses non-UTF-8 bytes, naming itself.
    #[test]
    fn recorded_paths_must_be_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"runs/r\xff");
        for flag in ["--out", "--data", "--resume", "--cluster", "--trace"] {
            let args: Vec<&std::ffi::OsStr> = vec!["lowcomm".as_ref(), "train".as_ref(), flag.as_ref(), bad];
            let e = Cli::command().try_get_matches_from(args).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ValueValidation, "{flag}");
            let text = e.to_string();
            assert!(text.contains(&format!("{flag} runs/r")) && text.contains("path contains invalid UTF-8"), "{text}");
        }
        let ok = Cli::command().try_get_matches_from(["lowcomm", "train", "--out", "runs/ü"]);
        assert!(ok.is_ok());
    }

    #[test]
    fn ranges_name_what_the_bounds_mean() {
        assert!(super::temperature("-1").unwrap_err().contains("0: greedy"));
        assert_eq!(super::temperature("0").unwrap(), 0.0);
        assert!(super::top_k("-5").unwrap_err().contains(">= 0 (0: sample among all tokens)"));
        assert!(super::learning_rate("-0.001").unwrap_err().contains("> 0"));
        assert!(super::learning_rate("0").is_err() && super::learning_rate("nan").is_err());
        assert_eq!(super::positive_u64("3").unwrap(), 3);
        assert!(super::positive_u64("0").unwrap_err().contains("at least 1"));
        assert!(super::count_usize("1.5").unwrap_err().contains("whole number"));
        assert_eq!((super::on_off("on"), super::on_off("off")), (Ok(true), Ok(false)));
        assert!(super::on_off("yes").unwrap_err().contains("on or off"));
        assert_eq!(super::clip_or_off("off"), Ok(super::ClipArg::Off));
        assert_eq!(super::clip_or_off("0.5"), Ok(super::ClipArg::Phi(0.5)));
        assert!(super::clip_or_off("0").unwrap_err().contains("> 0"));
    }
}
