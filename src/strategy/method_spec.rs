//! Methods as written on the command line (`lowcomm compare --methods`,
//! `lowcomm plan --methods`): names, `NAME:key=value` variants, and `all`
//! expanded to every method of [`Method::NAMES`] with its own defaults.

use super::method::Method;
use anyhow::{bail, Result};

/// One method as asked for: a name and the settings of this variant.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// As written (`co2:tau=4`); the bare name for a method `all` added.
    pub spec: String,
    /// The method's name.
    pub name: String,
    /// `[methods.NAME]` keys for this run only.
    pub settings: Vec<(String, toml::Value)>,
    /// Added by `all` rather than named: a misfit is skipped, not refused.
    pub implied: bool,
}

impl Entry {
    /// Its directory under `runs/` (the spec with `:`, `=`, `/` made `_`).
    pub fn dir(&self) -> String {
        self.spec.replace([':', '=', '/'], "_")
    }
}

/// `NAME:key=value:...`: a method and settings written into its
/// `[methods.NAME]` section for this run only (e.g.
/// `flexdemo:replicator=random:compression=0.05`), so one comparison can
/// hold one method several ways. Values are TOML (`true`, `0.05`,
/// `"random"`); a bare word is taken as a string. A `:` inside double
/// quotes is part of the value (`diloco:outer_wire="topk:64+2bit"`).
fn variant(spec: &str) -> Result<Entry> {
    let mut parts = split_outside_quotes(spec, ':').into_iter();
    let name = parts.next().unwrap_or_default().to_string();
    let mut settings = Vec::new();
    for kv in parts {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--methods {spec}: `{kv}` is not key=value; e.g. flexdemo:replicator=random:compression=0.05");
        };
        let value = format!("v = {v}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(v.to_string()));
        settings.push((k.to_string(), value));
    }
    if name == "all" && !settings.is_empty() {
        bail!("--methods {spec}: `all` takes no settings; give them per method, e.g. --methods all,co2:tau=24");
    }
    Ok(Entry { spec: spec.to_string(), name, settings, implied: false })
}

/// `s` cut at every `sep` that is not inside double quotes.
fn split_outside_quotes(s: &str, sep: char) -> Vec<&str> {
    let (mut parts, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in s.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c == sep && !quoted => {
                parts.push(&s[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The runs `specs` ask for, in order. `all` stands for every method of
/// [`Method::NAMES`] (in that order) with its documented defaults; a spec
/// next to `all` naming one of them (`all,co2:tau=24`) runs in place of
/// that method's default run (several variants of it: all of them).
pub fn expand(specs: &[String]) -> Result<Vec<Entry>> {
    let named = specs.iter().filter(|s| s.as_str() != "all").map(|s| variant(s)).collect::<Result<Vec<_>>>()?;
    check_named(&named)?;
    if !specs.iter().any(|s| s == "all") {
        return Ok(named);
    }
    let mut out = Vec::new();
    for name in Method::NAMES {
        let mine: Vec<Entry> = named.iter().filter(|e| e.name == name).cloned().collect();
        if mine.is_empty() {
            out.push(Entry { spec: name.to_string(), name: name.to_string(), settings: Vec::new(), implied: true });
        }
        out.extend(mine);
    }
    Ok(out)
}

/// Refuses a name that is not a method, and the same run asked for twice
/// (`ddp,ddp`: compare would run it twice into one directory and write its
/// rows twice). Two specs are the same run when their directories are.
fn check_named(named: &[Entry]) -> Result<()> {
    if let Some(e) = named.iter().find(|e| !Method::NAMES.contains(&e.name.as_str())) {
        bail!("unknown method `{}` in --methods; the methods are: {}", e.name, Method::NAMES.join(", "));
    }
    for (i, e) in named.iter().enumerate() {
        if let Some(first) = named[..i].iter().find(|f| f.dir() == e.dir()) {
            let same = if first.spec == e.spec { String::new() } else { format!(" (as `{}`)", first.spec) };
            bail!("--methods names `{}` twice{same}: give each method or NAME:key=value variant once", e.spec);
        }
    }
    Ok(())
}

/// The command-line flag that sets `[methods.NAME]` key `key`.
pub fn flag_of(key: &str) -> String {
    match key {
        "warmup_steps" => "--dpu-warmup".into(),
        "clip" => "--outer-clip".into(),
        other => format!("--{}", other.replace('_', "-")),
    }
}

/// The keys a flag sets, each the setting of some methods: whether method
/// `m` takes any of `keys` (`--tau`: plan gives it to `tau` and DiLoCo's `h`).
pub fn takes_any<'a>(keys: &'a [&'a str]) -> impl Fn(&str) -> bool + 'a {
    move |m| keys.iter().any(|k| Method::takes(m, k))
}

/// Refuses `flag` when none of the methods `names` `takes` it: it would
/// change nothing. `compare` and `plan` share it, so the same flags are
/// refused the same way.
pub fn refuse_unused_flag(flag: &str, takes: impl Fn(&str) -> bool, names: &[String]) -> Result<()> {
    if names.iter().any(|m| takes(m)) {
        return Ok(());
    }
    let owners: Vec<&str> = Method::NAMES.iter().copied().filter(|m| takes(m)).collect();
    let mut seen: Vec<&str> = Vec::new();
    for n in names {
        if !seen.contains(&n.as_str()) {
            seen.push(n);
        }
    }
    bail!(
        "{flag} applies to none of {}: it is a setting of {}; add one of those to --methods, or drop {flag}",
        seen.join(", "),
        owners.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(s: &str) -> Vec<String> {
        s.split(',').map(String::from).collect()
    }

    #[test]
    fn a_colon_inside_quotes_belongs_to_the_value() {
        let e = expand(&specs("diloco:outer_wire=\"topk:64+2bit\":h=5")).unwrap();
        let got: Vec<(String, String)> = e[0].settings.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        assert_eq!(got, [("outer_wire".into(), "\"topk:64+2bit\"".into()), ("h".into(), "5".into())]);
    }

    #[test]
    fn all_is_every_method_in_order_and_a_named_variant_replaces_its_default() {
        let e = expand(&specs("all")).unwrap();
        let names: Vec<&str> = e.iter().map(|e| e.spec.as_str()).collect();
        assert_eq!(names, Method::NAMES);
        assert!(e.iter().all(|e| e.implied && e.settings.is_empty()));
        let e = expand(&specs("co2:tau=4,all,co2:tau=8")).unwrap();
        let names: Vec<&str> = e.iter().map(|e| e.spec.as_str()).collect();
        let i = Method::NAMES.iter().position(|n| *n == "co2").unwrap();
        assert_eq!(names.len(), Method::NAMES.len() + 1);
        assert_eq!(&names[i..i + 2], ["co2:tau=4", "co2:tau=8"]);
        assert!(!e[i].implied && e[i].settings == vec![("tau".to_string(), toml::Value::Integer(4))]);
        assert_eq!(e[i].dir(), "co2_tau_4");
        // Without `all`: exactly what was asked.
        let e = expand(&specs("zero1,flexdemo:replicator=random")).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].settings, vec![("replicator".to_string(), toml::Value::String("random".into()))]);
    }

    #[test]
    fn bad_specs_name_the_spec_and_an_example() {
        let e = expand(&specs("all:tau=3")).unwrap_err().to_string();
        assert!(e.contains("--methods all:tau=3") && e.contains("all,co2:tau=24"), "{e}");
        let e = expand(&specs("all,co2:tau")).unwrap_err().to_string();
        assert!(e.contains("`tau` is not key=value"), "{e}");
    }

    #[test]
    fn a_method_flag_that_no_listed_method_takes_is_refused() {
        let e = refuse_unused_flag("--tau", takes_any(&["tau", "h"]), &specs("zero1,ddp")).unwrap_err().to_string();
        assert!(e.starts_with("--tau applies to none of zero1, ddp: it is a setting of local-sgd"), "{e}");
        assert!(e.contains("diloco") && e.contains("drop --tau"), "{e}");
        assert!(refuse_unused_flag("--tau", takes_any(&["tau", "h"]), &specs("ddp,diloco")).is_ok());
        assert_eq!((flag_of("clip"), flag_of("dn_c")), ("--outer-clip".to_string(), "--dn-c".to_string()));
    }

    #[test]
    fn duplicate_methods_are_refused_naming_the_duplicate() {
        let e = expand(&specs("ddp,zero1,ddp")).unwrap_err().to_string();
        assert!(e.contains("names `ddp` twice"), "{e}");
        let e = expand(&specs("all,co2:tau=4,co2:tau=4")).unwrap_err().to_string();
        assert!(e.contains("names `co2:tau=4` twice"), "{e}");
        // Different variants of one method are fine.
        assert_eq!(expand(&specs("co2:tau=4,co2:tau=8")).unwrap().len(), 2);
    }

    #[test]
    fn an_unknown_method_is_named_with_the_list_of_methods() {
        for list in ["ddp,foo", "all,foo:tau=3"] {
            let e = expand(&specs(list)).unwrap_err().to_string();
            assert!(e.starts_with("unknown method `foo` in --methods; the methods are: ddp, zero1"), "{e}");
            assert!(!e.contains("TOML") && !e.contains("--method "), "{e}");
        }
    }
}
