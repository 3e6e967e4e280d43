//! The model a plan is for: a preset (lowcomm's own, or a few well-known
//! Hugging Face shapes), a parameter count such as `7.5e9`, or a Hugging
//! Face `config.json` of a GPT-2, GPT-Neo or Llama-style model. Parameters
//! and training FLOPs per token are derived from the shape, and the
//! formula is kept so the plan can show it.
//!
//! FLOPs per token (forward + backward = 3 x forward; Kaplan et al. 2020,
//! PaLM App. B): `6 x (matmul parameters, LM head included) + 12 L T d`,
//! with T the context length. A bare parameter count gives `6 N`.

use crate::model::{GptConfig, ParamLayout};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// A model's size and cost, and where they come from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelSpec {
    /// What was asked for (preset, count or file).
    pub name: String,
    /// Parameters.
    pub params: f64,
    /// Training FLOPs per token.
    pub flops_per_token: f64,
    /// How `params` and `flops_per_token` were derived, with the numbers.
    pub formula: String,
    /// The model's shape as lowcomm's GPT, when it is one (a lowcomm preset
    /// or a GPT-2 or Llama config.json): its tensor layout makes DeMo's rows exact.
    #[serde(skip)]
    pub gpt: Option<GptConfig>,
}

/// Well-known shapes, as Hugging Face config.json text (GPT-Neo-125M,
/// Llama-2-7B; GPT-2 small is lowcomm's `gpt2` preset).
const HF_PRESETS: [(&str, &str); 2] = [
    (
        "gpt-neo-125m",
        r#"{"model_type":"gpt_neo","hidden_size":768,"num_layers":12,"num_heads":12,"vocab_size":50257,"max_position_embeddings":2048}"#,
    ),
    (
        "llama-7b",
        r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,"num_attention_heads":32,"intermediate_size":11008,"vocab_size":32000,"max_position_embeddings":4096}"#,
    ),
];

/// The largest parameter count a plan takes: 1e15, a thousand times today's
/// largest models. Beyond it byte counts no longer fit the plan's integers
/// (1e30 printed a saturated u64 of GB and 0 tokens/s).
pub const MAX_PARAMS: f64 = 1e15;

/// Names accepted as presets: lowcomm's and the Hugging Face shapes.
pub fn preset_names() -> Vec<&'static str> {
    GptConfig::PRESETS.iter().copied().chain(HF_PRESETS.iter().map(|(n, _)| *n)).collect()
}

impl ModelSpec {
    /// Parses `--model`: a preset, a parameter count, or a config.json path.
    pub fn parse(arg: &str) -> Result<ModelSpec> {
        let spec = Self::parse_unchecked(arg)?;
        if spec.params > MAX_PARAMS {
            bail!(
                "--model {arg}: {:.4e} parameters is beyond the {MAX_PARAMS:.0e} a plan covers (memory and times would overflow); give a count in [1, {MAX_PARAMS:.0e}], e.g. --model 7.5e9",
                spec.params
            );
        }
        Ok(spec)
    }

    fn parse_unchecked(arg: &str) -> Result<ModelSpec> {
        if GptConfig::PRESETS.contains(&arg) {
            return Ok(Self::from_gpt(arg, &GptConfig::preset(arg)?));
        }
        if let Some((_, json)) = HF_PRESETS.iter().find(|(n, _)| *n == arg) {
            return Self::from_hf_json(arg, json);
        }
        if let Ok(p) = arg.parse::<f64>() {
            if !(p >= 1.0 && p.is_finite()) {
                bail!("--model {arg}: a parameter count must be in [1, {MAX_PARAMS:.0e}], e.g. --model 7.5e9");
            }
            return Ok(ModelSpec {
                name: arg.to_string(),
                params: p.round(),
                flops_per_token: 6.0 * p.round(),
                formula: format!(
                    "{p:.4e} parameters (given); FLOPs/token = 6 N = {:.4e} (attention scores left out)",
                    6.0 * p
                ),
                gpt: None,
            });
        }
        let path = Path::new(arg);
        if path.is_file() {
            if path.extension().is_none_or(|e| e != "json") {
                bail!("--model {arg}: unknown model file format (expected a Hugging Face config.json, e.g. --model path/to/config.json)");
            }
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {arg}"))?;
            return Self::from_hf_json(arg, &text);
        }
        bail!(
            "unknown model `{arg}`: give a preset ({}), a parameter count (e.g. --model 7.5e9) or a Hugging Face config.json file",
            preset_names().join(", ")
        )
    }

    /// lowcomm's own model: exact parameter count from its layout, its FLOPs formula.
    pub fn from_gpt(name: &str, cfg: &GptConfig) -> ModelSpec {
        let params = ParamLayout::new(cfg).len as f64;
        let (d, l, t, v) = (cfg.n_embd, cfg.n_layer, cfg.ctx, cfg.vocab_size);
        ModelSpec {
            name: name.to_string(),
            params,
            flops_per_token: cfg.flops_per_token(),
            formula: match cfg.arch {
                crate::model::Arch::Gpt2 => format!(
                    "{params} parameters (lowcomm layout); FLOPs/token = 6 (12 L d^2 + V d) + 12 L T d with L {l}, d {d}, V {v}, T {t} = {:.4e}",
                    cfg.flops_per_token()
                ),
                crate::model::Arch::Llama => format!(
                    "{params} parameters (lowcomm llama layout); FLOPs/token = 6 (L (2d^2 + 2 d kv + 3 d f) + V d) + 12 L T d with L {l}, d {d}, kv {}, f {}, V {v}, T {t} = {:.4e}",
                    cfg.kv_width(),
                    cfg.ffn_width(),
                    cfg.flops_per_token()
                ),
            },
            gpt: Some(cfg.clone()),
        }
    }

    /// A Hugging Face config.json (GPT-2, GPT-Neo or Llama style).
    pub fn from_hf_json(name: &str, text: &str) -> Result<ModelSpec> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| anyhow::anyhow!("{name}: not valid JSON ({e}); expected a Hugging Face config.json"))?;
        let kind = match v.get("model_type").and_then(Value::as_str) {
            Some(k) => k.to_string(),
            None if v.get("n_embd").is_some() => "gpt2".into(),
            None if v.get("num_layers").is_some() => "gpt_neo".into(),
            None if v.get("num_hidden_layers").is_some() => "llama".into(),
            None => bail!("{name}: missing field `model_type` (e.g. \"model_type\": \"gpt2\"; supported: gpt2, gpt_neo, llama, mistral)"),
        };
        let get = |field: &str, example: &str| -> Result<f64> {
            match v.get(field) {
                None | Some(Value::Null) => {
                    bail!("{name}: missing field `{field}` for model_type {kind} (e.g. \"{field}\": {example})")
                }
                Some(raw) => match raw.as_f64() {
                    Some(x) if x >= 1.0 => Ok(x),
                    Some(x) => {
                        bail!("{name}: field `{field}` must be at least 1, got {x} (e.g. \"{field}\": {example})")
                    }
                    None => bail!("{name}: field `{field}` must be a number, got {raw} (e.g. \"{field}\": {example})"),
                },
            }
        };
        let opt = |field: &str| v.get(field).and_then(Value::as_f64).filter(|x| *x >= 1.0);
        let (params, matmul, l, d, t, detail) = match kind.as_str() {
            "gpt2" => {
                let (d, l, vocab) = (get("n_embd", "768")?, get("n_layer", "12")?, get("vocab_size", "50257")?);
                get("n_head", "12")?;
                let t = opt("n_positions").or(opt("n_ctx")).context(format!(
                    "{name}: missing field `n_positions` for model_type gpt2 (e.g. \"n_positions\": 1024)"
                ))?;
                let i = opt("n_inner").unwrap_or(4.0 * d);
                // Per block: qkv + proj (4d^2 + 4d), MLP (2 d i + i + d), two LayerNorms (4d).
                let block = 4.0 * d * d + 2.0 * d * i + 9.0 * d + i;
                let params = vocab * d + t * d + l * block + 2.0 * d;
                let formula = "V d + T d + L (4d^2 + 2 d i + 9d + i) + 2d, LM head tied";
                (params, l * (4.0 * d * d + 2.0 * d * i) + vocab * d, l, d, t, formula)
            }
            "gpt_neo" => {
                let d = get("hidden_size", "768")?;
                let (l, vocab) = (get("num_layers", "12")?, get("vocab_size", "50257")?);
                get("num_heads", "12")?;
                let t = get("max_position_embeddings", "2048")?;
                let i = opt("intermediate_size").unwrap_or(4.0 * d);
                // q, k, v without bias, out with bias (4d^2 + d), MLP (2 d i + i + d), LayerNorms (4d).
                let block = 4.0 * d * d + 2.0 * d * i + 6.0 * d + i;
                let params = vocab * d + t * d + l * block + 2.0 * d;
                let formula = "V d + T d + L (4d^2 + 2 d i + 6d + i) + 2d, LM head tied";
                (params, l * (4.0 * d * d + 2.0 * d * i) + vocab * d, l, d, t, formula)
            }
            "llama" | "mistral" => {
                let d = get("hidden_size", "4096")?;
                let (l, vocab) = (get("num_hidden_layers", "32")?, get("vocab_size", "32000")?);
                let heads = get("num_attention_heads", "32")?;
                let i = get("intermediate_size", "11008")?;
                let t = get("max_position_embeddings", "4096")?;
                let kv = opt("num_key_value_heads").unwrap_or(heads) * d / heads;
                let tied = v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
                // q, o (2d^2), k, v (2 d kv), gated MLP (3 d i), two RMSNorms (2d).
                let block = 2.0 * d * d + 2.0 * d * kv + 3.0 * d * i + 2.0 * d;
                let head = if tied { 0.0 } else { vocab * d };
                let params = vocab * d + l * block + d + head;
                let formula = if tied {
                    "V d + L (2d^2 + 2 d kv + 3 d i + 2d) + d, LM head tied"
                } else {
                    "2 V d + L (2d^2 + 2 d kv + 3 d i + 2d) + d (untied LM head)"
                };
                (params, l * (2.0 * d * d + 2.0 * d * kv + 3.0 * d * i) + vocab * d, l, d, t, formula)
            }
            other => bail!("{name}: model_type `{other}` is not supported; use a gpt2, gpt_neo or llama config.json, or give the parameter count (e.g. --model 7.5e9)"),
        };
        let flops = 6.0 * matmul + 12.0 * l * t * d;
        // A GPT-2 or Llama config is lowcomm's model of the same shape
        // (checked by its parameter count).
        let size = |f: &str| v.get(f).and_then(Value::as_u64).map(|x| x as usize);
        let gpt = match (kind.as_str(), size("vocab_size"), size("n_embd"), size("n_layer"), size("n_head")) {
            ("gpt2", Some(vocab_size), Some(n_embd), Some(n_layer), Some(n_head)) => {
                Some(GptConfig::gpt2(vocab_size, n_embd, n_layer, n_head, t as usize))
            }
            ("llama", ..) => {
                let heads = size("num_attention_heads").unwrap_or(32);
                let vocab = size("vocab_size").unwrap_or(32000);
                let shape = GptConfig::gpt2(vocab, d as usize, l as usize, heads, t as usize);
                let tied = v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
                Some(GptConfig {
                    n_kv_head: Some(size("num_key_value_heads").unwrap_or(heads)),
                    ffn_hidden: size("intermediate_size").or(Some(11008)),
                    tie_head: tied,
                    ..shape.with_arch(crate::model::Arch::Llama)
                })
            }
            _ => None,
        }
        .filter(|c| c.validate().is_ok() && ParamLayout::new(c).len as f64 == params);
        Ok(ModelSpec {
            name: name.to_string(),
            params,
            flops_per_token: flops,
            formula: format!(
                "{kind}: params = {detail} = {params:.4e}; FLOPs/token = 6 (matmul params {matmul:.4e}) + 12 L T d (L {l}, T {t}, d {d}) = {flops:.4e}"
            ),
            gpt,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_shapes_give_the_known_parameter_counts() {
        // GPT-2 small: 124,439,808 parameters (Hugging Face's count, tied head).
        assert_eq!(ModelSpec::parse("gpt2").unwrap().params, 124_439_808.0);
        // GPT-Neo-125M: 125,198,592.
        assert_eq!(ModelSpec::parse("gpt-neo-125m").unwrap().params, 125_198_592.0);
        // Llama-2-7B: 6,738,415,616.
        assert_eq!(ModelSpec::parse("llama-7b").unwrap().params, 6_738_415_616.0);
        // GPT-2's and Llama's configs are lowcomm shapes (their layouts count the same).
        let gpt2 = ModelSpec::parse("gpt2").unwrap().gpt.unwrap();
        assert_eq!(ParamLayout::new(&gpt2).len, 124_439_808);
        let llama = ModelSpec::parse("llama-7b").unwrap().gpt.unwrap();
        assert_eq!(
            (llama.arch, llama.kv_heads(), llama.ffn_width(), llama.tied()),
            (crate::model::Arch::Llama, 32, 11008, false)
        );
        assert_eq!(ParamLayout::new(&llama).len, 6_738_415_616);
        assert_eq!(llama.flops_per_token(), ModelSpec::parse("llama-7b").unwrap().flops_per_token);
        // FLOPs by hand for GPT-2: 6 (12 x (4 x 768^2 + 2 x 768 x 3072) + 50257 x 768) + 12 x 12 x 1024 x 768.
        let want = 6.0 * (12.0 * (4.0 * 768.0f64.powi(2) + 2.0 * 768.0 * 3072.0) + 50257.0 * 768.0)
            + 12.0 * 12.0 * 1024.0 * 768.0;
        assert_eq!(ModelSpec::parse("gpt2").unwrap().flops_per_token, want);
    }

    #[test]
    fn presets_and_counts() {
        let nano = ModelSpec::parse("nano").unwrap();
        assert_eq!(nano.params, ParamLayout::new(&GptConfig::nano()).len as f64);
        assert_eq!(nano.flops_per_token, GptConfig::nano().flops_per_token());
        let big = ModelSpec::parse("7.5e9").unwrap();
        assert_eq!((big.params, big.flops_per_token), (7.5e9, 4.5e10));
        assert!(big.formula.contains("6 N"));
    }

    #[test]
    fn bad_models_are_named_with_an_example() {
        let e = |s: &str| ModelSpec::parse(s).unwrap_err().to_string();
        assert!(
            e("huge").contains("give a preset (nano, micro, small, llama-nano, llama-micro, llama-small, gpt2"),
            "{}",
            e("huge")
        );
        assert!(e("0").contains("e.g. --model 7.5e9"));
        let dir = std::env::temp_dir().join(format!("lowcomm-plan-model-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let yaml = dir.join("config.yaml");
        std::fs::write(&yaml, "n_embd: 768").unwrap();
        assert!(e(yaml.to_str().unwrap()).contains("unknown model file format"));
        let json = dir.join("config.json");
        std::fs::write(
            &json,
            r#"{"model_type":"gpt2","n_embd":768,"n_head":12,"vocab_size":50257,"n_positions":1024}"#,
        )
        .unwrap();
        let msg = e(json.to_str().unwrap());
        assert!(msg.contains("missing field `n_layer`") && msg.contains("\"n_layer\": 12"), "{msg}");
        // A field given as text is named as such, not as missing.
        std::fs::write(
            &json,
            r#"{"model_type":"gpt2","n_embd":"768","n_layer":12,"n_head":12,"vocab_size":50257,"n_positions":1024}"#,
        )
        .unwrap();
        let msg = e(json.to_str().unwrap());
        assert!(
            msg.contains("field `n_embd` must be a number, got \"768\"") && msg.contains("\"n_embd\": 768"),
            "{msg}"
        );
        std::fs::write(&json, r#"{"model_type":"bert","hidden_size":768}"#).unwrap();
        assert!(e(json.to_str().unwrap()).contains("model_type `bert` is not supported"));
        std::fs::write(&json, "{not json").unwrap();
        assert!(e(json.to_str().unwrap()).contains("not valid JSON"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
