//! GPT configuration and the named presets.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Shape of a decoder-only GPT. Every field can be overridden from a preset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GptConfig {
    /// Vocabulary size; must equal the tokenizer's.
    pub vocab_size: usize,
    /// Width of the residual stream (`d_model`).
    pub n_embd: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block; must divide `n_embd`.
    pub n_head: usize,
    /// Context length: tokens per sequence and rows of the position embedding.
    pub ctx: usize,
    /// Dropout probability on the embeddings and on each residual branch
    /// (0 disables it, the default: these runs are short and data-rich).
    #[serde(default)]
    pub dropout: f32,
}

impl GptConfig {
    /// `nano`: vocab 2048, d 128, 2 layers, 4 heads, ctx 64 (~0.7M params; tests, demos).
    pub fn nano() -> Self {
        Self { vocab_size: 2048, n_embd: 128, n_layer: 2, n_head: 4, ctx: 64, dropout: 0.0 }
    }
    /// `micro`: vocab 4096, d 256, 4 layers, 4 heads, ctx 128 (~4.2M params).
    pub fn micro() -> Self {
        Self { vocab_size: 4096, n_embd: 256, n_layer: 4, n_head: 4, ctx: 128, dropout: 0.0 }
    }
    /// `small`: vocab 4096, d 512, 6 layers, 8 heads, ctx 256 (~21M params).
    pub fn small() -> Self {
        Self { vocab_size: 4096, n_embd: 512, n_layer: 6, n_head: 8, ctx: 256, dropout: 0.0 }
    }

    /// Names of the presets, for help texts and errors.
    pub const PRESETS: [&'static str; 3] = ["nano", "micro", "small"];

    /// Look a preset up by name.
    pub fn preset(name: &str) -> Result<Self> {
        Ok(match name {
            "nano" => Self::nano(),
            "micro" => Self::micro(),
            "small" => Self::small(),
            other => bail!("unknown model preset `{other}`: choose one of {}", Self::PRESETS.join(", ")),
        })
    }

    /// Check the shape is buildable; errors name the field and a fix.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("vocab_size", self.vocab_size),
            ("n_embd", self.n_embd),
            ("n_layer", self.n_layer),
            ("n_head", self.n_head),
            ("ctx", self.ctx),
        ] {
            if v == 0 {
                bail!("model.{name} must be at least 1");
            }
        }
        if !self.n_embd.is_multiple_of(self.n_head) {
            bail!(
                "model.n_embd ({}) must be a multiple of model.n_head ({}), e.g. n_embd = {}",
                self.n_embd,
                self.n_head,
                self.n_head * (self.n_embd / self.n_head).max(1)
            );
        }
        if !(0.0..1.0).contains(&self.dropout) {
            bail!("model.dropout must be in [0, 1), got {}", self.dropout);
        }
        if self.vocab_size > u32::MAX as usize {
            bail!("model.vocab_size {} does not fit token ids of 32 bits", self.vocab_size);
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Training FLOPs per token (forward + backward = 3x forward), counting
    /// every matmul including the LM head and attention scores: the usual
    /// 6N + 12 L T d estimate (Kaplan et al. 2020; PaLM App. B).
    pub fn flops_per_token(&self) -> f64 {
        let (c, l, t, v) = (self.n_embd as f64, self.n_layer as f64, self.ctx as f64, self.vocab_size as f64);
        let matmul_params = l * 12.0 * c * c + v * c;
        6.0 * matmul_params + 12.0 * l * t * c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid_and_named() {
        for p in GptConfig::PRESETS {
            GptConfig::preset(p).unwrap().validate().unwrap();
        }
        let e = GptConfig::preset("huge").unwrap_err().to_string();
        assert!(e.contains("nano, micro, small"), "{e}");
    }

    #[test]
    fn heads_must_divide_width() {
        let cfg = GptConfig { n_head: 3, ..GptConfig::nano() };
        assert!(cfg.validate().unwrap_err().to_string().contains("multiple of model.n_head"));
    }
}
