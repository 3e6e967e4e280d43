//! Which `train` flags can take effect on a run. A flag that its run would
//! ignore is refused with one error naming the flag and the fix; before,
//! `--method ddp --fixed-micro-batches 2`, `--dn-c` without `--outer dn` and
//! `--outer sgd --outer-momentum 0.5` ran as if the flag were not there.
//!
//! Only flags are checked here: a config file may hold the sections of
//! several methods (one file serves `lowcomm compare`, configs/README.md),
//! so a key there that this run's method does not use is not a mistake. A
//! flag is typed for this run, so one that cannot take effect is.
//!
//! The method flags themselves, as `[methods.NAME]` keys with their values:
//! [`method_flags`].

use super::TrainArgs;
use crate::optim::{OuterConfig, OuterKind};
use crate::strategy::method_spec::flag_of;
use crate::strategy::Method;
use crate::train::RunConfig;
use anyhow::{bail, Result};

/// `parallel.fixed_micro_batches`: not a `[methods.NAME]` key, but it
/// applies to some methods only, so it is checked like one.
const FIXED_MICRO_BATCHES: &str = "fixed_micro_batches";

/// `parallel.budget`: like `fixed_micro_batches`, only the methods that
/// accumulate while a round is in flight have a choice (the others train
/// the tokens of `steps` steps either way).
const BUDGET: &str = "budget";

/// The `[methods.NAME]` keys given as flags, with their values.
pub(super) fn method_flags(a: &TrainArgs) -> Vec<(&'static str, toml::Value)> {
    use toml::Value::{Boolean, Float, Integer, String as Text};
    let mut v = Vec::new();
    let mut put = |key, value: Option<toml::Value>| v.extend(value.map(|x| (key, x)));
    put("warmup_steps", a.dpu_warmup.map(|x| Integer(x as i64)));
    put("tau", a.tau.map(|x| Integer(x as i64)));
    put("outer_lr", a.outer_lr.map(Float));
    put("outer_momentum", a.outer_momentum.map(Float));
    put("penalty", a.penalty.map(Boolean));
    put(
        "clip",
        a.outer_clip.map(|c| match c {
            super::values::ClipArg::Phi(x) => Float(x),
            super::values::ClipArg::Off => Text("off".into()),
        }),
    );
    put("pull", a.pull.map(Float));
    put("shard_outer", a.shard_outer.then_some(Boolean(true)));
    put("inner_state", a.inner_state.clone().map(Text));
    put("replicator", a.replicator.clone().map(Text));
    put("compression", a.compression.map(Float));
    put("inner", a.inner.clone().map(Text));
    put("overlap", a.overlap.then_some(Boolean(true)));
    put("h", a.h.map(|x| Integer(x as i64)));
    put("outer", a.outer.clone().map(Text));
    put("dn_buffer", a.dn_buffer.map(|x| Integer(x as i64)));
    put("dn_c", a.dn_c.map(Float));
    put("grace", a.grace.map(Float));
    put("weight", a.weight.clone().map(Text));
    put("dylu", a.dylu.then_some(Boolean(true)));
    put("shards", a.shards.map(|x| Integer(x as i64)));
    put("fixed_shards", a.fixed_shards.then_some(Boolean(true)));
    v
}

/// The keys of the method-specific flags given on the command line.
pub(super) fn given(a: &TrainArgs) -> Vec<&'static str> {
    let mut keys: Vec<&'static str> = method_flags(a).into_iter().map(|(k, _)| k).collect();
    if a.fixed_micro_batches.is_some() {
        keys.push(FIXED_MICRO_BATCHES);
    }
    if a.budget.is_some() {
        keys.push(BUDGET);
    }
    keys
}

/// Whether method `method` uses the setting `key`.
pub(super) fn applies(key: &str, method: &str) -> bool {
    if key == FIXED_MICRO_BATCHES || key == BUDGET {
        // The methods that accumulate while a round is in flight are the ones K fixes.
        return Method::from_config(method, None).is_ok_and(|m| m.accumulates_while_communicating());
    }
    Method::takes(method, key)
}

/// The methods that use `key`, in `Method::NAMES` order.
pub(super) fn owners(key: &str) -> Vec<&'static str> {
    Method::NAMES.into_iter().filter(|m| applies(key, m)).collect()
}

/// Refuses the flags in `a` that the run configured as `cfg` (every flag
/// applied) would ignore: a method's flag on another method or on a
/// single-process run, an outer optimizer's flag under another outer
/// optimizer, and --link next to --cluster's links.
pub(super) fn check(a: &TrainArgs, cfg: &RunConfig) -> Result<()> {
    // Also checked where the runtime is built; here `compare` refuses it
    // before its first method runs, not at the first that builds a runtime.
    crate::train::parallel::check_link_and_cluster(&cfg.parallel)?;
    let method = cfg.parallel.method.as_deref();
    if method.is_some_and(|m| !Method::NAMES.contains(&m)) {
        return Ok(()); // the unknown name is the error to give, with the valid ones (Method::from_config)
    }
    for key in given(a) {
        if !method.is_some_and(|m| applies(key, m)) {
            bail!("{}", not_taken(key, method, a.method.is_some()));
        }
    }
    match method {
        Some(m) => check_outer(a, cfg, m),
        None => Ok(()),
    }
}

/// Why `key`'s flag cannot take effect under `method` (`None`: a
/// single-process run), and the fix; `explicit`: `--method` was given.
fn not_taken(key: &str, method: Option<&str>, explicit: bool) -> String {
    let flag = flag_of(key);
    let owners = owners(key);
    let (all, first) = (owners.join(", "), owners.first().copied().unwrap_or("ddp"));
    match method {
        Some(m) if explicit => format!(
            "{flag} is a setting of {all}, not of {m}: drop {flag}, or choose one of those with --method, e.g. --method {first}"
        ),
        Some(m) => format!(
            "{flag} is a setting of {all}, not of {m} (this run's method; --method was not given): pass --method, e.g. --method {first}"
        ),
        None => format!(
            "{flag} is a setting of {all}, and without --method this is a single-process run: pass --method, e.g. --method {first} --workers 2"
        ),
    }
}

/// DiLoCo's outer optimizer flags: `--dn-buffer` and `--dn-c` belong to
/// Delayed Nesterov (`--outer dn`), and `--outer sgd` has no momentum.
fn check_outer(a: &TrainArgs, cfg: &RunConfig, method: &str) -> Result<()> {
    if !Method::takes(method, "outer") {
        return Ok(()); // slowmo's and co2's momentum is always used
    }
    let set = cfg.methods.get(method).and_then(|t| t.get("outer"));
    let default = OuterConfig::default().kind.name();
    let outer = set.map_or(Some(default), |v| v.as_str());
    let Some(outer) = outer.filter(|o| OuterKind::NAMES.contains(o)) else {
        return Ok(()); // an outer optimizer that does not exist is refused with the valid ones
    };
    let why = match (a.outer.is_some(), set.is_some()) {
        (true, _) => format!("--outer {outer}"),
        (false, true) => format!("[methods.{method}] outer = \"{outer}\""),
        (false, false) => format!("{method}'s default outer optimizer {outer}"),
    };
    for (flag, given) in [("--dn-buffer", a.dn_buffer.is_some()), ("--dn-c", a.dn_c.is_some())] {
        if given && outer != OuterKind::Dn.name() {
            bail!("{flag} is a setting of Delayed Nesterov (--outer dn), not of {why}: add --outer dn, or drop {flag}");
        }
    }
    if a.outer_momentum.is_some() && outer == OuterKind::Sgd.name() {
        bail!(
            "--outer-momentum would be ignored: {why} has no momentum: drop --outer-momentum, or use an outer optimizer with momentum, e.g. --outer sgd-momentum (or nesterov, dn)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::train_args;
    use super::*;

    #[test]
    fn fixed_micro_batches_apply_to_the_methods_that_accumulate_while_communicating() {
        assert_eq!(owners(FIXED_MICRO_BATCHES), ["dpu", "acco-wp", "acco"]);
        assert_eq!(owners(BUDGET), ["dpu", "acco-wp", "acco"]);
        assert_eq!(owners("tau"), ["local-sgd", "overlap-local-sgd", "slowmo", "co2"]);
    }

    #[test]
    fn a_compare_variants_outer_makes_the_dn_flags_apply() {
        // `compare --methods diloco:outer=dn --dn-c 0.1`: the variant's outer counts.
        let a = train_args(&["--method", "diloco", "--dn-c", "0.1"]);
        let e = super::super::train_config::run_config_with(&a, &[]).unwrap_err().to_string();
        assert!(e.contains("--dn-c is a setting of Delayed Nesterov"), "{e}");
        let dn = [("outer".to_string(), toml::Value::String("dn".into()))];
        let (cfg, _) = super::super::train_config::run_config_with(&a, &dn).unwrap();
        assert_eq!(cfg.methods["diloco"]["dn_c"], toml::Value::Float(0.1));
    }

    #[test]
    fn every_method_flag_is_named_by_its_flag() {
        assert_eq!(flag_of("warmup_steps"), "--dpu-warmup");
        assert_eq!(flag_of("clip"), "--outer-clip");
        assert_eq!(flag_of("dn_c"), "--dn-c");
        assert_eq!(flag_of(FIXED_MICRO_BATCHES), "--fixed-micro-batches");
    }
}
