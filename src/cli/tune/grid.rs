//! `lowcomm tune --grid KEY=V1,V2,...`: the grid of a method's settings,
//! every combination of the values (the first `--grid` varying slowest),
//! each a method spec `NAME[:fixed...]:KEY=V:...` as `compare --methods`
//! takes them (values are TOML: `0.1`, `true`, `"dn"`; a bare word is a
//! string), so that a grid point runs, is stored and is reused exactly as a
//! compare variant is.

use crate::strategy::method_spec::{expand, Entry};
use crate::strategy::Method;
use anyhow::{bail, Result};

/// One `--grid` flag: a key and its values, as written.
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub key: String,
    pub values: Vec<String>,
}

/// Parses `KEY=V1,V2,...` for method `name` (whose spec `spec` fixes
/// `fixed` keys): one error naming the flag and the fix for anything else.
pub fn axis(flag: &str, name: &str, fixed: &[String]) -> Result<Axis> {
    let Some((key, values)) = flag.split_once('=') else {
        bail!("--grid {flag}: not KEY=V1,V2,...; e.g. --grid outer_lr=0.1,0.2,0.4");
    };
    let key = key.trim().to_string();
    if !Method::takes(name, &key) {
        bail!("--grid {flag}: `{key}` is not a setting of {name} (its keys: configs/README.md, [methods.NAME])");
    }
    if fixed.contains(&key) {
        bail!("--grid {flag}: --method fixes {key} already; drop it there or here");
    }
    let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
    if values.iter().any(|v| v.is_empty() || v.contains(':')) {
        bail!(
            "--grid {flag}: a value is empty or holds `:`; give values separated by commas, e.g. --grid {key}=0.1,0.2"
        );
    }
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            bail!("--grid {flag}: {v} is given twice");
        }
    }
    Ok(Axis { key, values })
}

/// Every point of the grid over `axes`, as method entries (`method`: the
/// `--method` spec). Refuses a key given by two `--grid` flags.
pub fn points(method: &str, axes: &[Axis]) -> Result<Vec<Entry>> {
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.key == a.key) {
            bail!("--grid {}: given twice; put every value in one --grid {}=V1,V2,...", a.key, a.key);
        }
    }
    let mut specs = vec![method.to_string()];
    for a in axes {
        specs = specs.iter().flat_map(|s| a.values.iter().map(move |v| format!("{s}:{}={v}", a.key))).collect();
    }
    expand(&specs)
}

/// A grid point's own settings (the grid's keys only), as `key=value`
/// joined by spaces: how the table names it.
pub fn describe(e: &Entry, axes: &[Axis]) -> String {
    axes.iter().zip(values(e, axes)).map(|(a, v)| format!("{}={v}", a.key)).collect::<Vec<_>>().join(" ")
}

/// A grid point's value of each axis, as `--grid` wrote it (`1e30`, not
/// TOML's `1000000000000000000000000000000.0`).
pub fn values(e: &Entry, axes: &[Axis]) -> Vec<String> {
    let written = |k: &str| {
        e.spec
            .split(':')
            .rev()
            .find_map(|kv| kv.split_once('=').filter(|(key, _)| *key == k).map(|(_, v)| v.to_string()))
    };
    axes.iter().map(|a| written(&a.key).unwrap_or_default()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_is_every_combination_first_axis_slowest() {
        let axes =
            [axis("outer_lr=0.1,0.2", "async-diloco", &[]).unwrap(), axis("grace=0,0.3", "async-diloco", &[]).unwrap()];
        let p = points("async-diloco:dylu=true", &axes).unwrap();
        let specs: Vec<&str> = p.iter().map(|e| e.spec.as_str()).collect();
        assert_eq!(
            specs,
            [
                "async-diloco:dylu=true:outer_lr=0.1:grace=0",
                "async-diloco:dylu=true:outer_lr=0.1:grace=0.3",
                "async-diloco:dylu=true:outer_lr=0.2:grace=0",
                "async-diloco:dylu=true:outer_lr=0.2:grace=0.3",
            ]
        );
        assert_eq!(p[1].settings[2], ("grace".to_string(), toml::Value::Float(0.3)));
        assert_eq!(describe(&p[1], &axes), "outer_lr=0.1 grace=0.3");
        let big = points("diloco", &[axis("outer_lr=1e30", "diloco", &[]).unwrap()]).unwrap();
        assert_eq!(values(&big[0], &[axis("outer_lr=1e30", "diloco", &[]).unwrap()]), ["1e30"]);
    }

    #[test]
    fn bad_axes_name_the_flag_and_the_fix() {
        let e = |flag: &str| axis(flag, "diloco", &["h".to_string()]).unwrap_err().to_string();
        assert!(e("outer_lr").contains("not KEY=V1,V2"), "{}", e("outer_lr"));
        assert!(e("tau=4,8").contains("`tau` is not a setting of diloco"), "{}", e("tau=4,8"));
        assert!(e("h=2,4").contains("--method fixes h already"), "{}", e("h=2,4"));
        assert!(e("outer_lr=0.1,,0.2").contains("a value is empty"), "{}", e("outer_lr=0.1,,0.2"));
        assert!(e("outer_lr=0.1,0.1").contains("0.1 is given twice"), "{}", e("outer_lr=0.1,0.1"));
        let twice = [axis("outer_lr=0.1", "diloco", &[]).unwrap(), axis("outer_lr=0.2", "diloco", &[]).unwrap()];
        assert!(points("diloco", &twice).unwrap_err().to_string().contains("--grid outer_lr: given twice"));
    }
}
