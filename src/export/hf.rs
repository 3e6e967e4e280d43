//! Hugging Face GPT-2 layout: `config.json`, `model.safetensors` with GPT-2
//! tensor names, `tokenizer.json` (+ `tokenizer_config.json`), loadable by
//! `transformers.GPT2LMHeadModel.from_pretrained(DIR)`.
//!
//! Differences from our layout that the export takes care of:
//! - GPT-2 uses `Conv1D`, which stores a linear weight as `[in, out]`; ours
//!   are `nn.Linear`'s `[out, in]`, so the four block matrices are transposed.
//! - Names get the `transformer.` prefix; the LM head is tied to `wte` and
//!   not written (transformers re-ties it).
//! - Our GELU is the erf form: `activation_function = "gelu"`.
//!
//! Check it with `scripts/check_hf_export.py` (see docs/export.md); read it
//! back with `train --init-from-hf` ([`crate::import::hf`]). Llama models
//! are written as `LlamaForCausalLM` by [`super::llama`].

use crate::checkpoint::{write_f32_tensors_with_metadata, Checkpoint};
use crate::data::Tokenizer;
use crate::model::{ParamLayout, TensorSpec};
use crate::util::atomic_write;
use anyhow::{Context, Result};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

/// Block matrices stored transposed by GPT-2's Conv1D.
const CONV1D: [&str; 4] = ["attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"];

/// Whether GPT-2 stores our tensor `name` transposed (a Conv1D weight).
pub fn is_conv1d(name: &str) -> bool {
    CONV1D.iter().any(|s| name.ends_with(s))
}

/// The `[cols, rows]` transpose of a row-major `[rows, cols]` matrix.
pub fn transpose(data: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; data.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = data[r * cols + c];
        }
    }
    t
}

/// The GPT-2 name, shape and data of one of our tensors.
pub fn to_gpt2(spec: &TensorSpec, data: &[f32]) -> (String, Vec<usize>, Vec<f32>) {
    let name = format!("transformer.{}", spec.name);
    if is_conv1d(&spec.name) {
        let (rows, cols) = (spec.shape[0], spec.shape[1]);
        (name, vec![cols, rows], transpose(data, rows, cols))
    } else {
        (name, spec.shape.clone(), data.to_vec())
    }
}

/// Write the Hugging Face directory for a checkpoint.
pub fn export(ck: &Checkpoint, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cfg = &ck.state.model;
    if cfg.arch == crate::model::Arch::Llama {
        return super::llama::export(ck, dir);
    }
    let layout = ParamLayout::new(cfg);
    let tensors: Vec<_> = layout.tensors.iter().map(|t| to_gpt2(t, &ck.params[t.range.clone()])).collect();
    let views: Vec<(&str, Vec<usize>, &[f32])> =
        tensors.iter().map(|(n, s, d)| (n.as_str(), s.clone(), d.as_slice())).collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    write_f32_tensors_with_metadata(&dir.join("model.safetensors"), &views, Some(meta))?;
    let tok = Tokenizer::from_json(&ck.tokenizer_json)?;
    let eot = tok.eot_id();
    let config = json!({
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.ctx,
        "n_ctx": cfg.ctx,
        "n_embd": cfg.n_embd,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": 4 * cfg.n_embd,
        "activation_function": "gelu",
        "layer_norm_epsilon": crate::model::gpt::LN_EPS,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": 0.0,
        "scale_attn_weights": true,
        "initializer_range": 0.02,
        "tie_word_embeddings": true,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "torch_dtype": "float32",
        "use_cache": true,
    });
    atomic_write(&dir.join("config.json"), serde_json::to_string_pretty(&config)?.as_bytes())?;
    write_tokenizer(ck, &tok, dir)
}

/// `tokenizer.json` and `tokenizer_config.json` of the checkpoint's tokenizer.
pub(super) fn write_tokenizer(ck: &Checkpoint, tok: &Tokenizer, dir: &Path) -> Result<()> {
    atomic_write(&dir.join("tokenizer.json"), ck.tokenizer_json.as_bytes())?;
    let tok_cfg = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": tok.eot_token(),
        "eos_token": tok.eot_token(),
        "model_max_length": ck.state.model.ctx,
    });
    atomic_write(&dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&tok_cfg)?.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GptConfig;

    #[test]
    fn conv1d_weights_are_transposed_and_renamed() {
        let l = ParamLayout::new(&GptConfig::gpt2(8, 4, 1, 2, 3));
        let spec = l.get("h.0.attn.c_attn.weight").unwrap(); // ours [12, 4]
        let data: Vec<f32> = (0..48).map(|i| i as f32).collect();
        let (name, shape, t) = to_gpt2(spec, &data);
        assert_eq!(name, "transformer.h.0.attn.c_attn.weight");
        assert_eq!(shape, [4, 12]);
        // ours[r=5][c=2] = 5*4+2 = 22 must be theirs[2][5]
        assert_eq!(t[2 * 12 + 5], 22.0);
        let (name, shape, t) = to_gpt2(l.get("wpe.weight").unwrap(), &data[..12]);
        assert_eq!((name.as_str(), shape, t[7]), ("transformer.wpe.weight", vec![3, 4], 7.0));
    }
}
