//! Hugging Face Llama layout: `config.json` for `LlamaForCausalLM` and
//! `model.safetensors`, plus the tokenizer files as for GPT-2.
//!
//! Our llama tensors already carry Hugging Face's names without the
//! `model.` prefix and `nn.Linear`'s `[out, in]` layout, and our rotary
//! embedding is transformers' `rotate_half` form: the export only adds the
//! prefix (`lm_head.weight` has none, and a tied head is not written:
//! transformers re-ties it from `tie_word_embeddings`).

use super::hf::write_tokenizer;
use crate::checkpoint::{write_f32_tensors_with_metadata, Checkpoint};
use crate::data::Tokenizer;
use crate::model::config::{RMS_EPS, ROPE_THETA};
use crate::model::{GptConfig, ParamLayout, TensorSpec};
use crate::util::atomic_write;
use anyhow::Result;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;

/// Hugging Face's name of one of our llama tensors.
pub fn hf_name(spec: &TensorSpec) -> String {
    match spec.name.as_str() {
        "lm_head.weight" => spec.name.clone(),
        name => format!("model.{name}"),
    }
}

/// `config.json` of a llama `cfg` (bos/eos: the tokenizer's end-of-text id).
pub fn config_json(cfg: &GptConfig, eot: u32) -> Value {
    json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.n_embd,
        "intermediate_size": cfg.ffn_width(),
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.kv_heads(),
        "head_dim": cfg.head_size(),
        "max_position_embeddings": cfg.ctx,
        "hidden_act": "silu",
        "rms_norm_eps": RMS_EPS,
        "rope_theta": ROPE_THETA,
        "rope_scaling": null,
        "attention_bias": false,
        "attention_dropout": 0.0,
        "mlp_bias": false,
        "pretraining_tp": 1,
        "tie_word_embeddings": cfg.tied(),
        "initializer_range": 0.02,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "torch_dtype": "float32",
        "use_cache": true,
    })
}

/// Write the Hugging Face directory for a llama checkpoint.
pub fn export(ck: &Checkpoint, dir: &Path) -> Result<()> {
    let tok = Tokenizer::from_json(&ck.tokenizer_json)?;
    write_model(&ck.state.model, &ck.params, tok.eot_id(), dir)?;
    write_tokenizer(ck, &tok, dir)
}

/// `model.safetensors` and `config.json` of a llama `cfg` with `params`.
pub fn write_model(cfg: &GptConfig, params: &[f32], eot: u32, dir: &Path) -> Result<()> {
    let layout = ParamLayout::new(cfg);
    let names: Vec<String> = layout.tensors.iter().map(hf_name).collect();
    let views: Vec<(&str, Vec<usize>, &[f32])> = (layout.tensors.iter().zip(&names))
        .map(|(t, n)| (n.as_str(), t.shape.clone(), &params[t.range.clone()]))
        .collect();
    let meta = HashMap::from([("format".to_string(), "pt".to_string())]);
    write_f32_tensors_with_metadata(&dir.join("model.safetensors"), &views, Some(meta))?;
    let config = config_json(cfg, eot);
    atomic_write(&dir.join("config.json"), serde_json::to_string_pretty(&config)?.as_bytes())
}
