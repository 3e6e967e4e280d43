//! `[methods.co2]` as read from TOML (co2_settings.rs): each mode's
//! defaults, keys of the other mode refused, every error naming the key and
//! a fix, and fairseq-CO2's beta by world size.

use crate::strategy::local::settings::{Beta, Clip, Co2Settings, Validate};
use anyhow::Result;

fn co2(text: &str) -> Result<Co2Settings> {
    let s: Co2Settings = toml::from_str(text)?;
    s.validate().map(|_| s)
}

#[test]
fn bad_values_name_the_key_and_an_example() {
    for (text, needles) in [
        ("tau = 0", &["tau must be at least 1", "tau = 12"][..]),
        ("outer_lr = 0.0", &["outer_lr must be > 0", "outer_lr = "]),
        ("outer_lr = -1.0", &["outer_lr must be > 0"]),
        ("outer_momentum = 1.0", &["outer_momentum must be in [0, 1)", "outer_momentum = "]),
        ("outer_momentum = -0.1", &["outer_momentum must be in [0, 1)"]),
        ("clip = 0.0", &["clip must be > 0", "clip = \"off\""]),
        ("clip = -2", &["clip must be > 0"]),
        ("mode = \"reference\"\ngap_penalty = 0.0", &["gap_penalty must be > 0", "gap_penalty = 1.0"]),
    ] {
        let e = format!("{:#}", co2(text).unwrap_err());
        for n in needles {
            assert!(e.contains(n), "{text}: {e}");
        }
    }
    for (text, needle) in [
        ("clip = \"sometimes\"", "clip must be a number > 0 or \"off\""),
        ("outer_momentum = \"big\"", "outer_momentum must be a number in [0, 1) or \"auto\", not \"big\""),
        ("mode = \"released\"", "unknown variant `released`"),
        ("gap_penalty = 2.0", "`gap_penalty` is a setting of mode = \"reference\""),
        ("mode = \"reference\"\npenalty = false", "`penalty` is a setting of mode = \"paper\""),
        ("mode = \"reference\"\nclip = 0.5", "`clip` is a setting of mode = \"paper\""),
        ("mode = \"reference\"\nshard_outer = true", "`shard_outer` is a setting of mode = \"paper\""),
        ("lambda = 1.0", "unknown field `lambda`"),
    ] {
        let e = format!("{:#}", toml::from_str::<Co2Settings>(text).unwrap_err());
        assert!(e.contains(needle), "{text}: {e}");
    }
}

#[test]
fn defaults_follow_the_mode_and_every_setting_writes_back() {
    assert_eq!(co2("").unwrap(), Co2Settings::paper());
    assert_eq!(co2("mode = \"paper\"").unwrap(), Co2Settings::default());
    let r = co2("mode = \"reference\"").unwrap();
    assert_eq!(r, Co2Settings::reference());
    assert_eq!((r.outer_lr, r.outer_momentum, r.gap_penalty), (1.0, Beta::Auto, 1.0));
    assert_eq!(co2("clip = 0.25").unwrap().clip, Clip::Phi(0.25));
    assert_eq!(co2("clip = 1").unwrap().clip, Clip::Phi(1.0));
    assert_eq!(co2("clip = \"off\"").unwrap().clip, Clip::Off);
    assert_eq!(co2("outer_momentum = \"auto\"").unwrap().outer_momentum, Beta::Auto);
    assert_eq!(co2("mode = \"reference\"\nouter_momentum = 0.2").unwrap().outer_momentum, Beta::Value(0.2));
    for s in [
        Co2Settings { clip: Clip::Off, ..Co2Settings::paper() },
        Co2Settings { clip: Clip::Phi(0.5), outer_momentum: Beta::Auto, shard_outer: true, ..Co2Settings::paper() },
        Co2Settings { gap_penalty: 2.0, outer_momentum: Beta::Value(0.2), ..Co2Settings::reference() },
    ] {
        let text = toml::to_string(&s).unwrap();
        assert_eq!(toml::from_str::<Co2Settings>(&text).unwrap(), s, "{text}");
    }
}

#[test]
fn auto_beta_is_fairseqs_rule_by_world_size() {
    // 0.0 / 0.2 / 0.5 / 0.6 for <= 16 / 32 / 64 / more GPUs.
    for (world, beta) in [(1, 0.0), (16, 0.0), (17, 0.2), (32, 0.2), (33, 0.5), (64, 0.5), (65, 0.6), (1024, 0.6)] {
        assert_eq!(Beta::Auto.at(world), beta, "{world} workers");
    }
    assert_eq!(Beta::Value(0.3).at(128), 0.3);
}
