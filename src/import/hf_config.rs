//! A Hugging Face GPT-2 `config.json`, read into our [`GptConfig`], with
//! every setting that would make our model compute other logits refused.
//!
//! Our GPT is GPT-2's block (pre-LN, learned positions, biases, LM head tied
//! to `wte`, attention scaled by 1/sqrt(head size), LayerNorm eps 1e-5) with
//! one difference: the MLP's GELU is the exact erf form, which
//! transformers calls `"gelu"`. GPT-2's own default, `"gelu_new"`, is the
//! tanh approximation; a model trained with it gives other logits here, so
//! it is refused with the one-line fix instead of loading silently.

use crate::model::gpt::LN_EPS;
use crate::model::GptConfig;
use anyhow::{bail, Result};
use serde_json::Value;

/// GELU's tanh approximations, under the names transformers gives them.
const TANH_GELUS: [&str; 4] = ["gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu_accurate"];

/// Our shape of the GPT-2 described by `config.json` text; `name` (the
/// file) starts every error. `dropout` is 0: it is the run's setting, not
/// the model's (transformers' `*_pdrop` are ignored).
pub fn parse(name: &str, text: &str) -> Result<GptConfig> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("{name}: not valid JSON ({e}); expected a Hugging Face config.json"))?;
    match v.get("model_type").and_then(Value::as_str) {
        Some("gpt2") => {}
        Some("llama") => return super::hf_llama::parse(name, &v),
        Some(other) => bail!(
            "{name}: model_type `{other}` is not supported: --init-from-hf loads GPT-2 (\"model_type\": \"gpt2\", GPT2LMHeadModel) and Llama (\"model_type\": \"llama\", LlamaForCausalLM) models only"
        ),
        None => bail!("{name}: missing field `model_type`; --init-from-hf loads GPT-2 and Llama models (\"model_type\": \"gpt2\" or \"llama\")"),
    }
    let fields = Fields { name, v: &v };
    let (size, need) = (|f: &str| fields.size(f), |f: &str, e: &str| fields.need(f, e));
    let n_embd = need("n_embd", "768")?;
    let cfg = GptConfig::gpt2(
        need("vocab_size", "50257")?,
        n_embd,
        need("n_layer", "12")?,
        need("n_head", "12")?,
        match size("n_positions")? {
            Some(t) => t,
            None => need("n_ctx", "1024")?,
        },
    );
    if let Some(i) = size("n_inner")?.filter(|&i| i != 4 * n_embd) {
        bail!(
            "{name}: n_inner {i} is not supported: lowcomm's MLP is 4 * n_embd = {} wide (\"n_inner\": null)",
            4 * n_embd
        );
    }
    let act = v.get("activation_function").and_then(Value::as_str).unwrap_or("gelu_new");
    if TANH_GELUS.contains(&act) {
        bail!(
            "{name}: activation_function `{act}` (GELU's tanh approximation, GPT-2's default) differs from lowcomm's exact erf GELU (`gelu`) and would give other logits; to start from these weights anyway, set \"activation_function\": \"gelu\" in a copy of the directory (the model then starts slightly off its original outputs)"
        );
    }
    if act != "gelu" {
        bail!("{name}: activation_function `{act}` is not supported: lowcomm's MLP uses the exact GELU (\"activation_function\": \"gelu\")");
    }
    let eps = v.get("layer_norm_epsilon").and_then(Value::as_f64).unwrap_or(1e-5);
    if (eps - f64::from(LN_EPS)).abs() > 1e-12 {
        bail!("{name}: layer_norm_epsilon {eps} is not supported: lowcomm's LayerNorm uses {LN_EPS:e} (\"layer_norm_epsilon\": 1e-05)");
    }
    // (setting, transformers' default, the value our model computes)
    for (key, default, ours) in [
        ("scale_attn_weights", true, true),
        ("scale_attn_by_inverse_layer_idx", false, false),
        ("add_cross_attention", false, false),
        ("tie_word_embeddings", true, true),
    ] {
        let got = v.get(key).and_then(Value::as_bool).unwrap_or(default);
        if got != ours {
            bail!(
                "{name}: {key} = {got} is not supported: lowcomm's GPT-2 computes {key} = {ours} (\"{key}\": {ours})"
            );
        }
    }
    cfg.validate().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok(cfg)
}

/// `ours` against the HF model's shape: the one line naming each field that
/// differs and the flags that make the run's model the HF one.
pub fn check_matches(dir: &str, hf: &GptConfig, ours: &GptConfig) -> Result<()> {
    let s = |v: usize| v.to_string();
    let fields = [
        ("arch", "--arch", hf.arch.name().to_string(), ours.arch.name().to_string()),
        ("vocab_size", "--vocab-size", s(hf.vocab_size), s(ours.vocab_size)),
        ("n_layer", "--n-layer", s(hf.n_layer), s(ours.n_layer)),
        ("n_embd", "--n-embd", s(hf.n_embd), s(ours.n_embd)),
        ("n_head", "--n-head", s(hf.n_head), s(ours.n_head)),
        ("n_kv_head", "--n-kv-head", s(hf.kv_heads()), s(ours.kv_heads())),
        ("n_positions", "--ctx", s(hf.ctx), s(ours.ctx)),
        ("ffn_hidden", "[model] ffn_hidden =", s(hf.ffn_width()), s(ours.ffn_width())),
        ("tie_head", "[model] tie_head =", hf.tied().to_string(), ours.tied().to_string()),
    ];
    let diff: Vec<_> = fields.iter().filter(|f| f.2 != f.3).collect();
    if diff.is_empty() {
        return Ok(());
    }
    let said: Vec<String> = diff.iter().map(|(k, _, h, o)| format!("{k} is {h} there, {o} in this run")).collect();
    let fix: Vec<String> = diff.iter().map(|(_, flag, h, _)| format!("{flag} {h}")).collect();
    bail!(
        "--init-from-hf {dir}: config.json's shape differs from this run's model ({}); pass {} (or set them in [model])",
        said.join(", "),
        fix.join(" ")
    )
}

/// The whole-number fields of a `config.json` named `name`, read with one
/// error wording for every model family.
pub(super) struct Fields<'a> {
    pub name: &'a str,
    pub v: &'a Value,
}

impl Fields<'_> {
    /// `field` if present (null counts as absent); an error unless a whole number >= 1.
    pub fn size(&self, field: &str) -> Result<Option<usize>> {
        let name = self.name;
        match self.v.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => match x.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n as usize)),
                _ => bail!("{name}: field `{field}` must be a whole number >= 1, got {x}"),
            },
        }
    }

    /// `field`, which must be present; the error shows `example`.
    pub fn need(&self, field: &str, example: &str) -> Result<usize> {
        let name = self.name;
        self.size(field)?
            .ok_or_else(|| anyhow::anyhow!("{name}: missing field `{field}` (e.g. \"{field}\": {example})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TINY: &str = r#"{"model_type":"gpt2","vocab_size":64,"n_embd":16,"n_layer":2,"n_head":2,"n_positions":16,"activation_function":"gelu"}"#;

    fn with(key: &str, value: &str) -> String {
        TINY.replacen('{', &format!("{{\"{key}\":{value},"), 1)
    }

    #[test]
    fn reads_the_shape_and_n_ctx_stands_in_for_n_positions() {
        let c = parse("c", TINY).unwrap();
        assert_eq!((c.vocab_size, c.n_embd, c.n_layer, c.n_head, c.ctx), (64, 16, 2, 2, 16));
        let old = TINY.replace("n_positions", "n_ctx");
        assert_eq!(parse("c", &old).unwrap().ctx, 16);
    }

    #[test]
    fn settings_that_change_logits_are_refused_naming_them() {
        // No activation_function: transformers' default, gelu_new.
        let no_act = TINY.replace(r#","activation_function":"gelu""#, "");
        for (text, want) in [
            (no_act, "gelu_new"),
            (TINY.replace("gpt2", "mistral"), "model_type `mistral`"),
            (TINY.replace("\"gelu\"", "\"relu\""), "activation_function `relu`"),
            (with("layer_norm_epsilon", "1e-6"), "layer_norm_epsilon"),
            (with("n_inner", "32"), "n_inner 32"),
            (with("scale_attn_by_inverse_layer_idx", "true"), "scale_attn_by_inverse_layer_idx"),
            (with("tie_word_embeddings", "false"), "tie_word_embeddings"),
            (TINY.replace("\"n_head\":2", "\"n_head\":3"), "multiple of model.n_head"),
            (TINY.replace(",\"n_layer\":2", ""), "missing field `n_layer`"),
        ] {
            let e = parse("cfg.json", &text).unwrap_err().to_string();
            assert!(e.starts_with("cfg.json: ") && e.contains(want) && !e.contains('\n'), "{want}: {e}");
        }
        // n_inner = 4 n_embd and an explicit 1e-5 are ours.
        parse("c", &with("n_inner", "64")).unwrap();
        parse("c", &with("layer_norm_epsilon", "1e-05")).unwrap();
    }

    #[test]
    fn a_shape_mismatch_names_each_field_and_the_flags() {
        let hf = parse("c", TINY).unwrap();
        check_matches("d", &hf, &hf).unwrap();
        let ours = GptConfig { n_layer: 4, ctx: 32, ..hf.clone() };
        let e = check_matches("d", &hf, &ours).unwrap_err().to_string();
        assert!(e.contains("n_layer is 2 there, 4 in this run") && e.contains("n_positions is 16 there"), "{e}");
        assert!(e.contains("pass --n-layer 2 --ctx 16"), "{e}");
    }
}
