//! A Hugging Face Llama `config.json` (`LlamaForCausalLM`) read into our
//! llama [`GptConfig`]; every setting that would make our blocks compute
//! other logits is refused in one line naming the key and the value we
//! compute (RMSNorm eps 1e-5, rope theta 10000 without scaling, SiLU, no
//! biases, head size `hidden_size / num_attention_heads`). The rotary
//! settings are read where either transformers writes them: `rope_theta`
//! and `rope_scaling` (4.x) or `rope_parameters` (5.x).

use crate::model::config::{RMS_EPS, ROPE_THETA};
use crate::model::{Arch, GptConfig};
use anyhow::{bail, Result};
use serde_json::Value;

/// Our shape of the Llama `v` (the parsed `config.json` named `name`).
pub fn parse(name: &str, v: &Value) -> Result<GptConfig> {
    let fields = super::hf_config::Fields { name, v };
    let (size, need) = (|f: &str| fields.size(f), |f: &str, e: &str| fields.need(f, e));
    let heads = need("num_attention_heads", "32")?;
    let hidden = need("hidden_size", "4096")?;
    let cfg = GptConfig {
        n_kv_head: Some(size("num_key_value_heads")?.unwrap_or(heads)),
        ffn_hidden: Some(need("intermediate_size", "11008")?),
        tie_head: v.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false),
        ..GptConfig::gpt2(
            need("vocab_size", "32000")?,
            hidden,
            need("num_hidden_layers", "32")?,
            heads,
            need("max_position_embeddings", "4096")?,
        )
        .with_arch(Arch::Llama)
    };
    if let Some(s) = v.get("rope_scaling").filter(|s| !s.is_null()) {
        bail!("{name}: rope_scaling {s} is not supported: lowcomm's rotary embedding is unscaled (\"rope_scaling\": null)");
    }
    // transformers 5 writes {"rope_type": "default", "rope_theta": ...}; any other type scales the angles.
    let rope = v.get("rope_parameters").filter(|p| !p.is_null());
    if let Some(p) = rope {
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
        if kind != "default" {
            bail!("{name}: rope_parameters.rope_type `{kind}` is not supported: lowcomm's rotary embedding is unscaled (\"rope_type\": \"default\")");
        }
    }
    let theta = rope.and_then(|p| p.get("rope_theta")).or_else(|| v.get("rope_theta"));
    for key in ["attention_bias", "mlp_bias"] {
        if v.get(key).and_then(Value::as_bool).unwrap_or(false) {
            bail!("{name}: {key} = true is not supported: lowcomm's llama blocks have no biases (\"{key}\": false)");
        }
    }
    let act = v.get("hidden_act").and_then(Value::as_str).unwrap_or("silu");
    if act != "silu" {
        bail!("{name}: hidden_act `{act}` is not supported: lowcomm's SwiGLU uses SiLU (\"hidden_act\": \"silu\")");
    }
    for (key, value, ours) in
        [("rms_norm_eps", v.get("rms_norm_eps"), f64::from(RMS_EPS)), ("rope_theta", theta, f64::from(ROPE_THETA))]
    {
        let got = value.and_then(Value::as_f64).unwrap_or(ours);
        if (got - ours).abs() > 1e-12 * ours.max(1.0) {
            bail!("{name}: {key} {got} is not supported: lowcomm's llama blocks use {ours:e} (\"{key}\": {ours})");
        }
    }
    if let Some(hd) = size("head_dim")?.filter(|&d| d * heads != hidden) {
        bail!(
            "{name}: head_dim {hd} is not supported: lowcomm's heads are hidden_size / num_attention_heads = {} wide (\"head_dim\": {})",
            hidden / heads,
            hidden / heads
        );
    }
    cfg.validate().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"model_type":"llama","vocab_size":64,"hidden_size":16,"intermediate_size":40,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":16}"#;

    fn with(key: &str, value: &str) -> String {
        TINY.replacen('{', &format!("{{\"{key}\":{value},"), 1)
    }

    fn parse_text(text: &str) -> Result<GptConfig> {
        parse("cfg.json", &serde_json::from_str(text).unwrap())
    }

    #[test]
    fn reads_the_llama_shape() {
        let c = parse_text(TINY).unwrap();
        assert_eq!((c.arch, c.vocab_size, c.n_embd, c.n_layer, c.n_head, c.ctx), (Arch::Llama, 64, 16, 2, 4, 16));
        assert_eq!((c.kv_heads(), c.ffn_width(), c.tied()), (2, 40, false));
        assert!(parse_text(&with("tie_word_embeddings", "true")).unwrap().tied());
        parse_text(&with("rope_scaling", "null")).unwrap();
        parse_text(&with("rope_parameters", r#"{"rope_type":"default","rope_theta":10000.0}"#)).unwrap();
        parse_text(&with("head_dim", "4")).unwrap();
    }

    #[test]
    fn settings_that_change_logits_are_refused_naming_the_key() {
        for (text, want) in [
            (with("rope_scaling", r#"{"type":"linear","factor":2.0}"#), "rope_scaling"),
            (with("attention_bias", "true"), "attention_bias"),
            (with("mlp_bias", "true"), "mlp_bias"),
            (with("hidden_act", "\"gelu\""), "hidden_act `gelu`"),
            (with("rms_norm_eps", "1e-6"), "rms_norm_eps"),
            (with("rope_theta", "500000.0"), "rope_theta"),
            (with("rope_parameters", r#"{"rope_type":"default","rope_theta":500000.0}"#), "rope_theta 500000"),
            (
                with("rope_parameters", r#"{"rope_type":"llama3","rope_theta":10000.0,"factor":8.0}"#),
                "rope_type `llama3`",
            ),
            (with("head_dim", "8"), "head_dim 8"),
            (TINY.replace("\"num_key_value_heads\":2", "\"num_key_value_heads\":3"), "model.n_kv_head (3)"),
            (TINY.replace(",\"intermediate_size\":40", ""), "missing field `intermediate_size`"),
        ] {
            let e = parse_text(&text).unwrap_err().to_string();
            assert!(e.starts_with("cfg.json: ") && e.contains(want) && !e.contains('\n'), "{want}: {e}");
        }
    }
}
