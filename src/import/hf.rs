//! `--init-from-hf DIR`: a local Hugging Face GPT-2 or Llama directory (`config.json`
//! and `model.safetensors`, as `save_pretrained` or `lowcomm export --hf`
//! write it) into our flat parameter layout.
//!
//! The inverse of [`crate::export::hf::to_gpt2`]: names lose the optional
//! `transformer.` prefix, and the four Conv1D matrices (stored `[in, out]`)
//! are transposed back to our `[out, in]`. The attention-mask buffers older
//! checkpoints carry (`attn.bias`, `attn.masked_bias`) are not parameters
//! and are skipped; an `lm_head.weight` must equal `wte` (our head is tied).
//! Anything else, missing or extra, is refused naming the tensor.
//!
//! A Llama directory (`LlamaForCausalLM`) is the inverse of
//! [`crate::export::llama`]: names lose the `model.` prefix and nothing is
//! transposed; `lm_head.weight` is a tensor of its own when the config says
//! `tie_word_embeddings: false`, and must equal the embedding otherwise.

use super::hf_config;
use crate::data::Tokenizer;
use crate::export::hf::{is_conv1d, transpose};
use crate::model::{Arch, GptConfig, ParamLayout};
use anyhow::{bail, Context, Result};
use safetensors::tensor::Dtype;
use safetensors::SafeTensors;
use std::collections::BTreeMap;
use std::path::Path;

/// A Hugging Face GPT-2 or Llama model read into our layout.
pub struct HfModel {
    /// Its shape, from `config.json`.
    pub config: GptConfig,
    /// Its parameters in [`ParamLayout`] order.
    pub params: Vec<f32>,
    /// `tokenizer.json` of the directory, if it has one.
    pub tokenizer_json: Option<String>,
}

/// Read the directory `dir`.
pub fn load(dir: &Path) -> Result<HfModel> {
    let d = dir.display();
    if !dir.is_dir() {
        bail!("--init-from-hf {d}: not a directory; give a local Hugging Face model directory (config.json + model.safetensors)");
    }
    let cfg_path = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg_path).with_context(|| {
        format!("--init-from-hf {d}: cannot read config.json (a Hugging Face model directory has one)")
    })?;
    let config = hf_config::parse(&cfg_path.display().to_string(), &text)?;
    let st_path = dir.join("model.safetensors");
    if !st_path.is_file() {
        let why = if dir.join("model.safetensors.index.json").is_file() {
            "sharded safetensors are not supported; re-save it in one file (save_pretrained(DIR, max_shard_size=\"100GB\"))"
        } else {
            "only safetensors are read; re-save it with save_pretrained(DIR, safe_serialization=True)"
        };
        bail!("--init-from-hf {d}: no model.safetensors: {why}");
    }
    let bytes = std::fs::read(&st_path).with_context(|| format!("cannot read {}", st_path.display()))?;
    let st = SafeTensors::deserialize(&bytes)
        .with_context(|| format!("{} is not a valid safetensors file", st_path.display()))?;
    let params = params_from(&config, &st).map_err(|e| anyhow::anyhow!("--init-from-hf {d}: {e}"))?;
    let tok_path = dir.join("tokenizer.json");
    let tokenizer_json = match tok_path.is_file() {
        true => {
            Some(std::fs::read_to_string(&tok_path).with_context(|| format!("cannot read {}", tok_path.display()))?)
        }
        false => None,
    };
    Ok(HfModel { config, params, tokenizer_json })
}

/// The parameters of a model of `cfg` from the tensors of `st`.
fn params_from(cfg: &GptConfig, st: &SafeTensors) -> Result<Vec<f32>> {
    if cfg.arch == Arch::Llama {
        return llama_params_from(cfg, st);
    }
    let layout = ParamLayout::new(cfg);
    let mut found: BTreeMap<String, (String, Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut lm_head = None;
    for (raw, view) in st.tensors() {
        let name = raw.strip_prefix("transformer.").unwrap_or(&raw).to_string();
        if name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") {
            continue; // causal-mask buffers, not parameters
        }
        if name != "lm_head.weight" && layout.get(&name).is_none() {
            bail!(
                "unexpected tensor `{raw}`: not part of GPT-2 as lowcomm builds it (GPT2LMHeadModel with a tied head)"
            );
        }
        if view.dtype() != Dtype::F32 {
            bail!("tensor `{raw}` is {:?}; only F32 is read: re-save the model in float32 (model.float().save_pretrained(DIR))", view.dtype());
        }
        let data: Vec<f32> =
            view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        if name == "lm_head.weight" {
            lm_head = Some((raw.clone(), data));
        } else if let Some((first, ..)) = found.insert(name.clone(), (raw.clone(), view.shape().to_vec(), data)) {
            bail!("tensor `{name}` is stored twice (`{first}` and `{raw}`)");
        }
    }
    let mut params = vec![0.0f32; layout.len];
    for spec in &layout.tensors {
        let Some((raw, shape, data)) = found.get(&spec.name) else {
            bail!(
                "missing tensor `transformer.{}` (shape {:?}); the directory is not a complete GPT-2",
                spec.name,
                hf_shape(spec)
            );
        };
        if *shape != hf_shape(spec) {
            bail!("tensor `{raw}` has shape {shape:?}, config.json's model needs {:?}", hf_shape(spec));
        }
        let out = &mut params[spec.range.clone()];
        match is_conv1d(&spec.name) {
            true => out.copy_from_slice(&transpose(data, shape[0], shape[1])),
            false => out.copy_from_slice(data),
        }
    }
    if let Some((raw, head)) = lm_head {
        if head.iter().map(|x| x.to_bits()).ne(params[layout.wte.clone()].iter().map(|x| x.to_bits())) {
            bail!("`{raw}` differs from the token embedding: an untied LM head is not supported (lowcomm's head is tied to wte)");
        }
    }
    Ok(params)
}

/// [`params_from`] for a Llama directory.
fn llama_params_from(cfg: &GptConfig, st: &SafeTensors) -> Result<Vec<f32>> {
    let layout = ParamLayout::new(cfg);
    let mut params = vec![0.0f32; layout.len];
    let mut seen = vec![false; layout.tensors.len()];
    let mut tied_head = None;
    for (raw, view) in st.tensors() {
        if raw.ends_with("rotary_emb.inv_freq") {
            continue; // a buffer of older checkpoints, not a parameter
        }
        let name = raw.strip_prefix("model.").unwrap_or(&raw);
        let at = layout.tensors.iter().position(|t| t.name == name);
        if at.is_none() && !(raw == "lm_head.weight" && cfg.tied()) {
            bail!(
                "unexpected tensor `{raw}`: not part of a Llama as lowcomm builds it (LlamaForCausalLM without biases)"
            );
        }
        if view.dtype() != Dtype::F32 {
            bail!("tensor `{raw}` is {:?}; only F32 is read: re-save the model in float32 (model.float().save_pretrained(DIR))", view.dtype());
        }
        let data: Vec<f32> =
            view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        let Some(i) = at else {
            tied_head = Some((raw.clone(), data));
            continue;
        };
        let spec = &layout.tensors[i];
        if view.shape() != spec.shape.as_slice() {
            bail!("tensor `{raw}` has shape {:?}, config.json's model needs {:?}", view.shape(), spec.shape);
        }
        if std::mem::replace(&mut seen[i], true) {
            bail!("tensor `{}` is stored twice", spec.name);
        }
        params[spec.range.clone()].copy_from_slice(&data);
    }
    if let Some(i) = seen.iter().position(|s| !s) {
        let spec = &layout.tensors[i];
        bail!(
            "missing tensor `{}` (shape {:?}); the directory is not a complete Llama",
            crate::export::llama::hf_name(spec),
            spec.shape
        );
    }
    if let Some((raw, head)) = tied_head {
        if head.iter().map(|x| x.to_bits()).ne(params[layout.wte.clone()].iter().map(|x| x.to_bits())) {
            bail!("`{raw}` differs from the token embedding, but config.json says tie_word_embeddings: true (set it to false to load the head untied)");
        }
    }
    Ok(params)
}

/// The shape GPT-2 stores `spec` in: Conv1D matrices transposed.
fn hf_shape(spec: &crate::model::TensorSpec) -> Vec<usize> {
    match is_conv1d(&spec.name) {
        true => vec![spec.shape[1], spec.shape[0]],
        false => spec.shape.clone(),
    }
}

/// The weights of `dir` for a run of `model` on a corpus tokenized by
/// `tokenizer`: the shapes must agree, and the directory's tokenizer (if it
/// has one) must be the corpus'. Every error is one line naming the field.
pub fn weights(dir: &Path, model: &GptConfig, tokenizer: &Tokenizer) -> Result<Vec<f32>> {
    let hf = load(dir)?;
    let d = dir.display().to_string();
    if hf.config.vocab_size != tokenizer.vocab_size() {
        let its = match hf.tokenizer_json {
            Some(_) => format!("{d}/tokenizer.json"),
            None => "TOKENIZER.json, the tokenizer.json it was trained with".into(),
        };
        bail!(
            "--init-from-hf {d}: config.json's vocab_size is {} but the corpus' tokenizer has {} tokens; prepare the corpus with the model's tokenizer (lowcomm data prepare --tokenizer {its})",
            hf.config.vocab_size,
            tokenizer.vocab_size()
        );
    }
    hf_config::check_matches(&d, &hf.config, model)?;
    if let Some(json) = &hf.tokenizer_json {
        let theirs = Tokenizer::from_json(json).and_then(|t| t.to_json());
        if theirs.ok() != Some(tokenizer.to_json()?) {
            bail!(
                "--init-from-hf {d}: its tokenizer.json is not the corpus' tokenizer; prepare the corpus with it (lowcomm data prepare --tokenizer {d}/tokenizer.json)"
            );
        }
    }
    Ok(hf.params)
}
