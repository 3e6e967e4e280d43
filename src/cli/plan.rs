//! `lowcomm plan`: the analytical plan of every method for a model on a
//! cluster profile (src/plan/), printed as one table and written as JSON.

use super::PlanArgs;
use crate::comm::WireDtype;
use crate::plan::setup::{self, Knobs};
use crate::plan::{hetero, plan_all, table, ModelSpec, Precision};
use crate::runtime::cluster::ClusterProfile;
use anyhow::{bail, Context, Result};

/// `--grad-clip`, default train's (`train.grad_clip`, 1.0); at least 0.
fn grad_clip(v: Option<f64>) -> Result<f64> {
    let c = v.unwrap_or(f64::from(crate::train::config::TrainSection::default().grad_clip));
    if c < 0.0 {
        bail!("--grad-clip must be >= 0 (0: no clipping), got {c}; e.g. --grad-clip 1.0");
    }
    Ok(c)
}

/// `--model` with the shape flags over it: they reshape a model that is
/// lowcomm's GPT (a preset or a GPT-2 or Llama config.json), counted by its layout.
fn model_spec(a: &PlanArgs) -> Result<ModelSpec> {
    let model = ModelSpec::parse(&a.model)?;
    if !a.shape.any() {
        return Ok(model);
    }
    let Some(gpt) = &model.gpt else {
        bail!(
            "{}: shape flags reshape a lowcomm preset ({}) or a GPT-2 or Llama config.json, not --model {}; give one of those, or the parameter count",
            a.shape.describe(),
            crate::model::GptConfig::PRESETS.join(", "),
            a.model
        );
    };
    let cfg = a.shape.over(gpt);
    cfg.validate()?;
    Ok(ModelSpec::from_gpt(&format!("{} {}", a.model, a.shape.describe()), &cfg))
}

/// Runs `lowcomm plan`.
pub fn plan(a: &PlanArgs) -> Result<()> {
    let model = model_spec(a)?;
    let profile = ClusterProfile::from_file(&a.cluster)?;
    let wire = match a.wire.as_deref() {
        None => None,
        Some("f32") => Some(WireDtype::F32),
        Some("bf16") => Some(WireDtype::Bf16),
        Some(w) => bail!("--wire must be f32 or bf16, got `{w}`; e.g. --wire bf16"),
    };
    let knobs = Knobs {
        tokens_per_micro_batch: a.batch.as_deref().map(setup::parse_batch).transpose()?,
        wire,
        grad_accum: a.grad_accum,
        precision: a.precision.parse::<Precision>()?,
        require_fit: a.require_fit,
        grad_clip: grad_clip(a.grad_clip)? > 0.0,
    };
    let methods = setup::methods(&a.methods, a.tau, a.compression)?;
    let mut costing = setup::costing(&model, &profile, &knobs)?;
    if let Some(speeds) = &a.speeds {
        hetero::pace(&mut costing, speeds)?;
    }
    let report = plan_all(model, &profile.name, &methods, &costing)?;
    if let Some(speeds) = &a.speeds {
        let list = speeds.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        println!("speeds   {list} (the slowest paces every method but dpu, acco-wp and acco; plan::hetero)");
    }
    print!("{}", table::render(&report));
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report)?;
        crate::util::fsio::atomic_write(path, text.as_bytes())
            .with_context(|| format!("cannot write {}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Cli, Command};
    use super::*;
    use crate::model::{GptConfig, ParamLayout};
    use clap::Parser;

    fn spec(args: &[&str]) -> Result<ModelSpec> {
        let cli = Cli::try_parse_from([&["lowcomm", "plan", "--cluster", "c.toml"][..], args].concat()).unwrap();
        let Command::Plan(a) = cli.command else { unreachable!() };
        model_spec(&a)
    }

    #[test]
    fn shape_flags_reshape_the_preset_and_count_its_layout() {
        let m = spec(&["--preset", "micro", "--n-layer", "8"]).unwrap();
        let want = GptConfig { n_layer: 8, ..GptConfig::micro() };
        assert_eq!(m.params, ParamLayout::new(&want).len as f64);
        assert_eq!(m.gpt, Some(want));
        assert_eq!(m.name, "micro --n-layer 8");
        assert_eq!(spec(&["--model", "micro"]).unwrap().params, ParamLayout::new(&GptConfig::micro()).len as f64);
        let e = spec(&["--model", "7.5e9", "--n-layer", "8"]).unwrap_err().to_string();
        assert!(e.starts_with("--n-layer 8: shape flags reshape") && e.contains("--model 7.5e9"), "{e}");
        let e = spec(&["--model", "nano", "--n-head", "3"]).unwrap_err().to_string();
        assert!(e.contains("multiple of model.n_head (3)"), "{e}");
    }
}
