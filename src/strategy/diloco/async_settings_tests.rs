use super::*;

fn err(text: &str) -> String {
    format!("{:#}", parse(text.parse().unwrap()).unwrap_err())
}

#[test]
fn defaults_and_bad_values_name_the_key_and_an_example() {
    let d = parse(toml::Table::new()).unwrap();
    assert_eq!((d.h, d.outer, d.outer_lr, d.outer_momentum), (50, OuterKind::Nesterov, None, 0.9));
    let lr = |outer: &str| parse(format!("outer = \"{outer}\"").parse().unwrap()).unwrap().outer_lr();
    assert_eq!(["nesterov", "sgd-momentum", "sgd", "dn"].map(lr), [MOMENTUM_OUTER_LR, MOMENTUM_OUTER_LR, 0.7, 0.7]);
    assert_eq!(parse("outer_lr = 0.3".parse().unwrap()).unwrap().diloco().outer_lr, 0.3);
    assert_eq!((d.grace, d.dylu, d.shards, d.fixed_shards), (None, false, None, false));
    assert_eq!((d.weight, d.dn_buffer, d.outer_config(6).dn_buffer), (Weight::Auto, None, 6));
    assert_eq!((d.shard_count(3), parse("shards = 5".parse().unwrap()).unwrap().shard_count(3)), (3, 5));
    let s =
        parse("outer = \"dn\"\ndn_buffer = 2\ndn_c = 0.5\nh = 3\ngrace = 1.5\ndylu = true".parse().unwrap()).unwrap();
    assert_eq!((s.outer, s.dn_buffer, s.dn_c, s.h, s.grace, s.dylu), (OuterKind::Dn, Some(2), 0.5, 3, Some(1.5), true));
    assert_eq!(s.diloco().outer_config(7), s.outer_config(7));
    assert_eq!(s.outer_config(7).dn_buffer, 2, "a dn_buffer given wins over the workers");
    for (text, w) in [("\"1/k\"", Weight::InvK), ("\"sqrt(k)/k\"", Weight::SqrtKOverK), ("\"1\"", Weight::One)] {
        assert_eq!(parse(format!("weight = {text}").parse().unwrap()).unwrap().weight, w, "{text}");
    }
    // A compare spec's `weight=1` and `grace=auto` arrive as TOML values: an integer, a text.
    assert_eq!(parse("weight = 1\ngrace = \"auto\"".parse().unwrap()).unwrap().weight, Weight::One);
    assert_eq!(parse("weight = 1.0\ngrace = 2".parse().unwrap()).unwrap().grace, Some(2.0));
    // The codec keys: diloco's, passed on with the rest.
    assert_eq!((d.outer_wire, d.error_feedback), (None, true));
    let c = parse("outer_wire = \"int8\"\nerror_feedback = false".parse().unwrap()).unwrap();
    assert_eq!((c.diloco().outer_wire, c.diloco().error_feedback), (Some(OuterWire::Int8), false));
    for (text, needles) in [
        ("h = 0", &["[methods.async-diloco]: h must be at least 1", "h = 50"][..]),
        ("dn_buffer = 0", &["[methods.async-diloco]: dn_buffer must be at least 1", "--dn-buffer 4"]),
        ("dn_buffer = 4\ndn_c = 0.3", &["dn_c must be in [0, 1/N] = [0, 0.25]"]),
        ("dn_c = -0.1", &["dn_c must be in [0, 1/N]"]),
        ("grace = -1.0", &["grace must be >= 0 seconds, got -1", "--grace 0.5"]),
        ("grace = \"soon\"", &["[methods.async-diloco]: grace must be seconds >= 0 or \"auto\", got \"soon\""]),
        (
            "weight = 2",
            &[
                "[methods.async-diloco]: weight must be one of \"auto\", \"1/k\", \"sqrt(k)/k\", \"1\", got \"2\"",
                "--weight 1/k",
            ],
        ),
        ("weight = \"k\"", &["got \"k\"", "weight = \"1/k\""]),
        ("outer = \"adam\"", &["outer \"adam\" does not exist", "--outer dn"]),
        ("dylu = 1", &["[methods.async-diloco]:"]),
        ("shards = 0", &["[methods.async-diloco]: shards must be at least 1", "--shards 4"]),
        ("outer_wire = \"fp8\"", &["[methods.async-diloco]:", "use f32, bf16, int8, fp4 or topk:K+2bit"]),
    ] {
        let e = err(text);
        for n in needles {
            assert!(e.contains(n), "{text}: {e}");
        }
    }
}

#[test]
fn the_keys_method_rs_accepts_are_the_fields() {
    let s = AsyncDilocoSettings {
        outer_lr: Some(0.1),
        dn_buffer: Some(2),
        grace: Some(0.5),
        shards: Some(4),
        outer_wire: Some(OuterWire::Int8),
        error_decay: 0.5,
        ..AsyncDilocoSettings::default()
    };
    super::super::settings::tests::assert_keys_are_fields(&s, KEYS);
}
