//! From the command line's model, cluster profile and knobs to a [`Costing`].
//!
//! The profile gives the cluster (shape, links, device speed and memory);
//! the model replaces the profile's `[timing]` model: its parameters are
//! what travels and its FLOPs per token set the micro-batch time, unless
//! the profile fixes `timing.seconds_per_micro_batch`.

use super::{Costing, ModelSpec, Precision};
use crate::comm::WireDtype;
use crate::runtime::cluster::ClusterProfile;
use crate::runtime::sim::SimSpec;
use crate::runtime::Topology;
use crate::strategy::Method;
use anyhow::{bail, Context, Result};

/// Tokens per micro-batch when neither `--batch` nor the profile says:
/// the ACCO paper's 24 sequences x 1024 tokens (App. A, Tab. 4).
pub const DEFAULT_TOKENS_PER_MICRO_BATCH: usize = 24 * 1024;

/// `--batch`: `SEQUENCESxLENGTH` (e.g. `24x1024`) or a token count (`24576`).
pub fn parse_batch(s: &str) -> Result<usize> {
    let err = || {
        format!("--batch {s}: give sequences x length or tokens per micro-batch, each at least 1, e.g. --batch 24x1024 or --batch 24576")
    };
    let n = match s.split_once(['x', 'X']) {
        Some((a, b)) => {
            let a: usize = a.trim().parse().ok().with_context(err)?;
            let b: usize = b.trim().parse().ok().with_context(err)?;
            a.checked_mul(b).with_context(err)?
        }
        None => s.trim().parse().ok().with_context(err)?,
    };
    if n == 0 {
        bail!("{}", err());
    }
    Ok(n)
}

/// What the command line fixes besides the model and the profile.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// Tokens per micro-batch (`--batch`); default: the profile's, else 24 x 1024.
    pub tokens_per_micro_batch: Option<usize>,
    /// `--wire`; default: the profile's, else f32.
    pub wire: Option<WireDtype>,
    /// `--grad-accum`.
    pub grad_accum: usize,
    /// `--precision`.
    pub precision: Precision,
    /// `--require-fit`: a profile without `[device] memory` is an error.
    pub require_fit: bool,
    /// `--grad-clip` > 0: the run clips the global gradient norm, so the
    /// sharded methods all-reduce one norm per round (train's default
    /// clips: `train.grad_clip = 1.0`).
    pub grad_clip: bool,
}

/// The costing of `model` on `profile`.
pub fn costing(model: &ModelSpec, profile: &ClusterProfile, k: &Knobs) -> Result<Costing> {
    profile.validate()?;
    let tokens =
        k.tokens_per_micro_batch.or(profile.timing.tokens_per_micro_batch).unwrap_or(DEFAULT_TOKENS_PER_MICRO_BATCH);
    let micro_batch_s = match (profile.timing.seconds_per_micro_batch, &profile.device) {
        (Some(s), _) => s,
        (None, Some(d)) => model.flops_per_token * tokens as f64 / (d.peak_flops * d.utilization),
        (None, None) => bail!("device: missing [device] section, e.g. [device] peak_flops = 312e12, utilization = 0.4"),
    };
    let device_memory = profile.device.as_ref().and_then(|d| d.memory);
    if k.require_fit && device_memory.is_none() {
        bail!("--require-fit: the profile `{}` has no [device] memory, so fit is unknown; add e.g. memory = 80e9 under [device] (an A100-80GB)", profile.name);
    }
    let workers = profile.workers();
    Ok(Costing {
        params: model.params as usize,
        tokens_per_micro_batch: tokens,
        spec: SimSpec {
            micro_batch_s,
            speeds: vec![1.0; workers],
            link: Some(profile.link_model()?),
            comm_scale: 1.0,
            topology: Topology { workers, per_node: profile.workers_per_node, server: false },
            memory_bytes_per_s: profile.work_rates().0,
            flops_per_s: profile.work_rates().1,
            interference: profile.interference(),
            start: Vec::new(),
            micro_batch_cv: profile.timing.micro_batch_cv.unwrap_or(0.0),
            micro_batch_correlation: profile.timing.micro_batch_correlation.unwrap_or(0.0),
            draw_seed: 0, // plan takes the draws' expectation, draws none
            parallel: true,
        },
        wire: k.wire.or(profile.wire).unwrap_or_default(),
        grad_accum: k.grad_accum.max(1),
        grad_clip: k.grad_clip,
        optimizer: crate::optim::OptimizerConfig::default(),
        fixed_micro_batches: None,
        device_memory,
        precision: k.precision,
        layout: super::demo::layout_for(model),
    })
}

/// `--methods all|a,b|NAME:key=value` (`strategy::method_spec`, as
/// `compare` takes them) with `--tau` and `--compression` given to the
/// methods that take them where the spec does not set the key (`--tau` is
/// DiLoCo's H: its inner steps per round); a knob out of range is the
/// method's own error.
pub fn methods(specs: &[String], tau: Option<u64>, compression: Option<f64>) -> Result<Vec<Method>> {
    use crate::strategy::method_spec::{expand, refuse_unused_flag, takes_any};
    let entries = expand(specs)?;
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    // A knob no listed method takes would change nothing: refused, as compare does.
    if tau.is_some() {
        refuse_unused_flag("--tau", takes_any(&["tau", "h"]), &names)?;
    }
    if compression.is_some() {
        refuse_unused_flag("--compression", takes_any(&["compression"]), &names)?;
    }
    entries
        .iter()
        .map(|e| {
            let name = e.name.as_str();
            let mut t: toml::Table = e.settings.iter().cloned().collect();
            for key in ["tau", "h"] {
                if let Some(tau) = tau.filter(|_| Method::takes(name, key)) {
                    t.entry(key).or_insert(toml::Value::Integer(i64::try_from(tau).unwrap_or(i64::MAX)));
                }
            }
            if let Some(c) = compression.filter(|_| Method::takes(name, "compression")) {
                t.entry("compression").or_insert(toml::Value::Float(c));
            }
            Method::from_config(name, Some(&t))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_and_knob_errors_name_the_flag_and_an_example() {
        assert_eq!(parse_batch("24x1024").unwrap(), 24576);
        assert_eq!(parse_batch("24576").unwrap(), 24576);
        for bad in ["0", "x", "24x", "-3", "1.5"] {
            assert!(parse_batch(bad).unwrap_err().to_string().contains("e.g. --batch 24x1024"), "{bad}");
        }
        let e = methods(&["co2".into()], Some(0), None).unwrap_err().to_string();
        assert!(e.contains("[methods.co2]: tau must be at least 1") && e.contains("tau = 12"), "{e}");
        let e = methods(&["demo".into()], None, Some(1.5)).unwrap_err().to_string();
        assert!(e.contains("compression must be in (0, 1]"), "{e}");
        let e = methods(&["co3".into()], None, None).unwrap_err().to_string();
        assert!(e.contains("unknown method `co3`"), "{e}");
        // --tau goes only to the methods that take it.
        let ms = methods(&["all".into()], Some(4), Some(0.05)).unwrap();
        assert_eq!(ms.len(), Method::NAMES.len());
        assert!(ms.iter().filter_map(Method::local_tau).all(|t| t == 4));
    }

    #[test]
    fn variants_as_compare_takes_them_and_a_variants_key_wins_over_the_flag() {
        let specs = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ms = methods(&specs(&["async-diloco", "async-diloco:dylu=true:grace=0.5:h=7"]), Some(5), None).unwrap();
        match &ms[..] {
            [Method::AsyncDiloco(a), Method::AsyncDiloco(b)] => {
                assert_eq!((a.h, a.dylu, a.grace), (5, false, None));
                assert_eq!((b.h, b.dylu, b.grace), (7, true, Some(0.5)));
            }
            other => panic!("{other:?}"),
        }
        let e = methods(&specs(&["co2:tau"]), None, None).unwrap_err().to_string();
        assert!(e.contains("`tau` is not key=value"), "{e}");
    }

    #[test]
    fn knobs_that_no_listed_method_takes_are_refused() {
        let e = methods(&["ddp".into()], Some(5), None).unwrap_err().to_string();
        assert!(e.starts_with("--tau applies to none of ddp"), "{e}");
        let e = methods(&["ddp".into(), "co2".into()], None, Some(0.5)).unwrap_err().to_string();
        assert!(e.starts_with("--compression applies to none of ddp, co2: it is a setting of demo, flexdemo"), "{e}");
        assert!(methods(&["ddp".into(), "co2".into()], Some(5), None).is_ok());
    }

    #[test]
    fn async_diloco_takes_tau_as_its_h() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let ms = methods(&names(&["async-diloco"]), Some(5), None).unwrap();
        assert!(matches!(&ms[..], [Method::AsyncDiloco(s)] if s.h == 5), "{ms:?}");
        let e = methods(&names(&["async-diloco"]), Some(0), None).unwrap_err().to_string();
        assert!(e.contains("async-diloco") && e.contains("h"), "{e}");
    }

    #[test]
    fn a_profile_without_device_memory_is_unknown_fit_unless_required() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/clusters");
        let tcp = ClusterProfile::from_file(dir.join("tcp-4x1-10g.toml")).unwrap();
        let model = ModelSpec::parse("gpt2").unwrap();
        let mut k = Knobs {
            tokens_per_micro_batch: None,
            wire: None,
            grad_accum: 1,
            precision: Precision::Mixed,
            require_fit: false,
            grad_clip: true,
        };
        assert_eq!(costing(&model, &tcp, &k).unwrap().device_memory, None);
        k.require_fit = true;
        let e = costing(&model, &tcp, &k).unwrap_err().to_string();
        assert!(e.contains("no [device] memory") && e.contains("memory = 80e9"), "{e}");
        let a100 = ClusterProfile::from_file(dir.join("a100-4x8-100g.toml")).unwrap();
        let c = costing(&model, &a100, &k).unwrap();
        assert_eq!(c.device_memory, Some(80e9));
        // Micro-batch time by hand: FLOPs/token x 24576 tokens / (312e12 x 0.4).
        assert_eq!(c.spec.micro_batch_s, model.flops_per_token * 24576.0 / (312e12 * 0.4));
    }
}
