//! GPT configuration and the named presets.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// Which block the model is built of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// GPT-2: learned positions, LayerNorm with bias, GELU MLP, biases, tied head.
    #[default]
    Gpt2,
    /// Llama: rotary positions, RMSNorm, SwiGLU MLP, no biases,
    /// grouped-query attention, tied or untied head.
    Llama,
}

impl Arch {
    /// The name configs and flags use (`gpt2`, `llama`).
    pub fn name(self) -> &'static str {
        match self {
            Arch::Gpt2 => "gpt2",
            Arch::Llama => "llama",
        }
    }
}

impl std::str::FromStr for Arch {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "gpt2" => Ok(Arch::Gpt2),
            "llama" => Ok(Arch::Llama),
            other => bail!("unknown model arch `{other}`: choose gpt2 or llama"),
        }
    }
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

/// Shape of a decoder-only GPT. Every field can be overridden from a preset.
/// Fields at their defaults are not written out, so a GPT-2 config
/// serialises exactly as it did before `arch` existed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GptConfig {
    /// Block architecture: `gpt2` (the default, so every older config and
    /// checkpoint loads as GPT-2) or `llama`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub arch: Arch,
    /// Vocabulary size; must equal the tokenizer's.
    pub vocab_size: usize,
    /// Width of the residual stream (`d_model`).
    pub n_embd: usize,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block; must divide `n_embd`.
    pub n_head: usize,
    /// Key/value heads of grouped-query attention (llama only): each serves
    /// `n_head / n_kv_head` query heads. Unset means `n_head` (plain
    /// multi-head attention); must divide `n_head`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_kv_head: Option<usize>,
    /// Hidden width of the SwiGLU MLP (llama only). Unset means Llama's
    /// rule: 2/3 of 4 `n_embd`, rounded up to a multiple of 64 (see
    /// [`GptConfig::ffn_width`]). GPT-2's MLP is always 4 `n_embd`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ffn_hidden: Option<usize>,
    /// Whether the LM head is the token embedding (llama only; default
    /// true). `false` adds a separate `lm_head.weight` as Hugging Face's
    /// Llama checkpoints have. GPT-2 is always tied.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub tie_head: bool,
    /// Context length: tokens per sequence (and, for GPT-2, rows of the
    /// position embedding).
    pub ctx: usize,
    /// Dropout probability on the embeddings and on each residual branch
    /// (0 disables it, the default: these runs are short and data-rich).
    /// GPT-2 only.
    #[serde(default)]
    pub dropout: f32,
}

/// RMSNorm epsilon of the llama blocks (Llama's `rms_norm_eps`).
pub const RMS_EPS: f32 = 1e-5;
/// Rotary embedding base of the llama blocks (Llama's `rope_theta`).
pub const ROPE_THETA: f32 = 10000.0;

impl GptConfig {
    /// A GPT-2 shape with every other field at its default.
    pub fn gpt2(vocab_size: usize, n_embd: usize, n_layer: usize, n_head: usize, ctx: usize) -> Self {
        Self {
            arch: Arch::Gpt2,
            vocab_size,
            n_embd,
            n_layer,
            n_head,
            n_kv_head: None,
            ffn_hidden: None,
            tie_head: true,
            ctx,
            dropout: 0.0,
        }
    }
    /// `nano`: vocab 2048, d 128, 2 layers, 4 heads, ctx 64 (~0.7M params; tests, demos).
    pub fn nano() -> Self {
        Self::gpt2(2048, 128, 2, 4, 64)
    }
    /// `micro`: vocab 4096, d 256, 4 layers, 4 heads, ctx 128 (~4.2M params).
    pub fn micro() -> Self {
        Self::gpt2(4096, 256, 4, 4, 128)
    }
    /// `small`: vocab 4096, d 512, 6 layers, 8 heads, ctx 256 (~21M params).
    pub fn small() -> Self {
        Self::gpt2(4096, 512, 6, 8, 256)
    }
    /// `gpt2`: GPT-2 small, vocab 50257, d 768, 12 layers, 12 heads, ctx
    /// 1024 (124,439,808 params, Hugging Face's count for `gpt2`): for
    /// runs on accelerators (docs/torch.md); the default corpus trains a
    /// tokenizer of the full 50257 tokens.
    pub fn gpt2_small() -> Self {
        Self::gpt2(50257, 768, 12, 12, 1024)
    }
    /// The Llama-style model of a GPT-2 shape: same vocab, width, depth,
    /// heads and context, `n_head / 2` key/value heads (grouped-query
    /// attention), Llama's MLP width rule, tied head.
    pub fn llama_of(gpt: Self) -> Self {
        Self { arch: Arch::Llama, n_kv_head: Some((gpt.n_head / 2).max(1)), ..gpt }
    }
    /// `llama-nano`: nano's shape in Llama blocks, 2 KV heads, MLP 384.
    pub fn llama_nano() -> Self {
        Self::llama_of(Self::nano())
    }
    /// `llama-micro`: micro's shape in Llama blocks, 2 KV heads, MLP 704.
    pub fn llama_micro() -> Self {
        Self::llama_of(Self::micro())
    }
    /// `llama-small`: small's shape in Llama blocks, 4 KV heads, MLP 1408.
    pub fn llama_small() -> Self {
        Self::llama_of(Self::small())
    }

    /// This shape in `arch`'s blocks: to llama it keeps the llama fields
    /// (unset: plain multi-head attention, Llama's MLP rule, tied head); to
    /// GPT-2 it clears them.
    pub fn with_arch(self, arch: Arch) -> Self {
        match arch {
            Arch::Llama => Self { arch, ..self },
            Arch::Gpt2 => Self { arch, n_kv_head: None, ffn_hidden: None, tie_head: true, ..self },
        }
    }

    /// Names of the presets, for help texts and errors.
    pub const PRESETS: [&'static str; 7] =
        ["nano", "micro", "small", "llama-nano", "llama-micro", "llama-small", "gpt2"];

    /// Look a preset up by name.
    pub fn preset(name: &str) -> Result<Self> {
        Ok(match name {
            "nano" => Self::nano(),
            "micro" => Self::micro(),
            "small" => Self::small(),
            "llama-nano" => Self::llama_nano(),
            "llama-micro" => Self::llama_micro(),
            "llama-small" => Self::llama_small(),
            "gpt2" => Self::gpt2_small(),
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
        match self.arch {
            Arch::Gpt2 => {
                for (name, set) in [
                    ("n_kv_head", self.n_kv_head.is_some()),
                    ("ffn_hidden", self.ffn_hidden.is_some()),
                    ("tie_head", !self.tie_head),
                ] {
                    if set {
                        bail!("model.{name} is a llama setting: set arch = \"llama\" or remove {name}");
                    }
                }
            }
            Arch::Llama => {
                let kv = self.kv_heads();
                if kv == 0 || !self.n_head.is_multiple_of(kv) {
                    bail!(
                        "model.n_kv_head ({kv}) must divide model.n_head ({}), e.g. n_kv_head = {}",
                        self.n_head,
                        if self.n_head.is_multiple_of(2) { self.n_head / 2 } else { self.n_head }
                    );
                }
                if !self.head_size().is_multiple_of(2) {
                    bail!(
                        "model.n_embd / model.n_head ({}) must be even for rotary embeddings, e.g. n_embd = {}",
                        self.head_size(),
                        self.n_head * (self.head_size() + 1)
                    );
                }
                if self.ffn_hidden == Some(0) {
                    bail!("model.ffn_hidden must be at least 1 (or unset for Llama's rule)");
                }
                if self.dropout > 0.0 {
                    bail!("model.dropout is not supported with arch = \"llama\": set dropout = 0");
                }
            }
        }
        Ok(())
    }

    /// Width of one attention head.
    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head
    }

    /// Key/value heads: `n_kv_head`, or `n_head` when unset (and for GPT-2).
    pub fn kv_heads(&self) -> usize {
        match self.arch {
            Arch::Gpt2 => self.n_head,
            Arch::Llama => self.n_kv_head.unwrap_or(self.n_head),
        }
    }

    /// Width of the keys (and of the values): `kv_heads * head_size`.
    pub fn kv_width(&self) -> usize {
        self.kv_heads() * self.head_size()
    }

    /// Hidden width of the MLP: 4 `n_embd` for GPT-2; for llama
    /// `ffn_hidden`, or 8 `n_embd` / 3 rounded up to a multiple of 64.
    pub fn ffn_width(&self) -> usize {
        match self.arch {
            Arch::Gpt2 => 4 * self.n_embd,
            Arch::Llama => self.ffn_hidden.unwrap_or_else(|| (8 * self.n_embd).div_ceil(3).div_ceil(64) * 64),
        }
    }

    /// Whether the LM head is the token embedding.
    pub fn tied(&self) -> bool {
        self.arch == Arch::Gpt2 || self.tie_head
    }

    /// Training FLOPs per token (forward + backward = 3x forward), counting
    /// every matmul including the LM head and attention scores: the usual
    /// 6N + 12 L T d estimate (Kaplan et al. 2020; PaLM App. B), N the
    /// parameters of the matmuls (per block GPT-2: 12 d^2; llama: q, o
    /// 2 d^2, k, v 2 d kv, SwiGLU 3 d f).
    pub fn flops_per_token(&self) -> f64 {
        let (c, l, t, v) = (self.n_embd as f64, self.n_layer as f64, self.ctx as f64, self.vocab_size as f64);
        let block = match self.arch {
            Arch::Gpt2 => 12.0 * c * c,
            Arch::Llama => {
                let (kv, f) = (self.kv_width() as f64, self.ffn_width() as f64);
                2.0 * c * c + 2.0 * c * kv + 3.0 * c * f
            }
        };
        let matmul_params = l * block + v * c;
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
        assert!(e.contains("nano, micro, small, llama-nano"), "{e}");
    }

    #[test]
    fn heads_must_divide_width() {
        let cfg = GptConfig { n_head: 3, ..GptConfig::nano() };
        assert!(cfg.validate().unwrap_err().to_string().contains("multiple of model.n_head"));
    }

    #[test]
    fn kv_heads_must_divide_heads_and_llama_fields_need_llama() {
        let cfg = GptConfig { n_kv_head: Some(3), ..GptConfig::llama_nano() };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("model.n_kv_head (3) must divide model.n_head (4), e.g. n_kv_head = 2"), "{e}");
        let cfg = GptConfig { n_kv_head: Some(2), ..GptConfig::nano() };
        let e = cfg.validate().unwrap_err().to_string();
        assert!(e.contains("model.n_kv_head is a llama setting"), "{e}");
    }

    #[test]
    fn llama_mlp_width_follows_the_rule() {
        // 8 * 128 / 3 = 341.3 -> 384; 8 * 256 / 3 = 682.7 -> 704; 8 * 512 / 3 = 1365.3 -> 1408
        let w: Vec<_> = [GptConfig::llama_nano(), GptConfig::llama_micro(), GptConfig::llama_small()]
            .iter()
            .map(|c| (c.ffn_width(), c.kv_heads()))
            .collect();
        assert_eq!(w, [(384, 2), (704, 2), (1408, 4)]);
        assert_eq!(GptConfig { ffn_hidden: Some(100), ..GptConfig::llama_nano() }.ffn_width(), 100);
    }

    #[test]
    fn old_configs_load_as_gpt2_and_serialise_unchanged() {
        let old = r#"{"vocab_size":2048,"n_embd":128,"n_layer":2,"n_head":4,"ctx":64,"dropout":0.0}"#;
        let cfg: GptConfig = serde_json::from_str(old).unwrap();
        assert_eq!(cfg, GptConfig::nano());
        assert_eq!(serde_json::to_string(&cfg).unwrap(), old);
        let llama = GptConfig { tie_head: false, ..GptConfig::llama_nano() };
        let s = serde_json::to_string(&llama).unwrap();
        assert!(s.contains(r#""arch":"llama""#) && s.contains(r#""tie_head":false"#), "{s}");
        assert_eq!(serde_json::from_str::<GptConfig>(&s).unwrap(), llama);
    }

    #[test]
    fn llama_flops_count_its_matmuls() {
        let c = GptConfig::llama_nano();
        // per block 2*128^2 + 2*128*64 + 3*128*384, head 2048*128, attention 12*2*64*128
        let want = 6.0 * (2.0 * (2.0 * 16384.0 + 2.0 * 8192.0 + 3.0 * 49152.0) + 262144.0) + 12.0 * 2.0 * 64.0 * 128.0;
        assert_eq!(c.flops_per_token(), want);
    }
}
