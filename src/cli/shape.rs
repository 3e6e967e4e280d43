//! The model-shape flags (`--arch`, `--vocab-size`, `--n-layer`,
//! `--n-embd`, `--n-head`, `--n-kv-head`, `--ctx`), one clap group shared by
//! `train`, `compare`, `tune` and `plan`: each overrides the same field of
//! the preset's (or config's) shape.

use super::values;
use crate::model::{Arch, GptConfig};
use crate::train::config::ModelSection;
use clap::builder::TypedValueParser;
use clap::Args;

/// Shape flags; unset ones keep the preset's value.
#[derive(Args, Debug, Clone, Default)]
pub struct ShapeArgs {
    /// Block architecture, over the preset's: gpt2 or llama (RMSNorm,
    /// rotary positions, SwiGLU, no biases; see docs/bring-your-own.md).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["gpt2", "llama"]).map(|s| parse_arch(&s)))]
    pub arch: Option<Arch>,
    /// Vocabulary size of the model, over the preset's (must match the corpus' tokenizer).
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub vocab_size: Option<usize>,
    /// Transformer blocks, over the preset's.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub n_layer: Option<usize>,
    /// Residual-stream width, over the preset's (a multiple of --n-head).
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub n_embd: Option<usize>,
    /// Attention heads, over the preset's.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub n_head: Option<usize>,
    /// Key/value heads of grouped-query attention (llama; must divide the heads).
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub n_kv_head: Option<usize>,
    /// Context length in tokens, over the preset's.
    #[arg(long, allow_negative_numbers = true, value_parser = values::positive_usize)]
    pub ctx: Option<usize>,
}

/// One of the values clap's list admits.
fn parse_arch(s: &str) -> Arch {
    s.parse().expect("clap admits gpt2 and llama only")
}

impl ShapeArgs {
    /// The flags as (flag, value), in the order above.
    fn given(&self) -> [(&'static str, Option<String>); 7] {
        let s = |v: Option<usize>| v.map(|v| v.to_string());
        [
            ("--arch", self.arch.map(|a| a.name().to_string())),
            ("--vocab-size", s(self.vocab_size)),
            ("--n-layer", s(self.n_layer)),
            ("--n-embd", s(self.n_embd)),
            ("--n-head", s(self.n_head)),
            ("--n-kv-head", s(self.n_kv_head)),
            ("--ctx", s(self.ctx)),
        ]
    }

    /// Whether any shape flag is given.
    pub fn any(&self) -> bool {
        self.given().iter().any(|(_, v)| v.is_some())
    }

    /// The given flags as they were typed, e.g. `--n-layer 8 --ctx 32`.
    pub fn describe(&self) -> String {
        let set = self.given().into_iter().filter_map(|(f, v)| v.map(|v| format!("{f} {v}")));
        set.collect::<Vec<_>>().join(" ")
    }

    /// Put the given flags into a config's `[model]` section.
    pub fn over_section(&self, m: &mut ModelSection) {
        if self.arch.is_some() {
            m.arch = self.arch;
        }
        for (flag, field) in [
            (self.vocab_size, &mut m.vocab_size),
            (self.n_layer, &mut m.n_layer),
            (self.n_embd, &mut m.n_embd),
            (self.n_head, &mut m.n_head),
            (self.n_kv_head, &mut m.n_kv_head),
            (self.ctx, &mut m.ctx),
        ] {
            if flag.is_some() {
                *field = flag;
            }
        }
    }

    /// `cfg` with the given flags applied (not validated).
    pub fn over(&self, cfg: &GptConfig) -> GptConfig {
        let cfg = &self.arch.map_or_else(|| cfg.clone(), |a| cfg.clone().with_arch(a));
        GptConfig {
            n_kv_head: self.n_kv_head.or(cfg.n_kv_head),
            vocab_size: self.vocab_size.unwrap_or(cfg.vocab_size),
            n_layer: self.n_layer.unwrap_or(cfg.n_layer),
            n_embd: self.n_embd.unwrap_or(cfg.n_embd),
            n_head: self.n_head.unwrap_or(cfg.n_head),
            ctx: self.ctx.unwrap_or(cfg.ctx),
            ..cfg.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_flags_replace_only_their_fields() {
        let s = ShapeArgs { n_layer: Some(8), ctx: Some(32), ..Default::default() };
        let nano = GptConfig::nano();
        let c = s.over(&nano);
        assert_eq!((c.n_layer, c.ctx, c.n_embd, c.vocab_size), (8, 32, nano.n_embd, nano.vocab_size));
        assert_eq!(s.describe(), "--n-layer 8 --ctx 32");
        let mut m = ModelSection { n_layer: Some(3), n_head: Some(2), ..Default::default() };
        s.over_section(&mut m);
        assert_eq!((m.n_layer, m.n_head, m.ctx), (Some(8), Some(2), Some(32)));
        assert!(s.any() && !ShapeArgs::default().any());
        let l = ShapeArgs { arch: Some(Arch::Llama), n_kv_head: Some(2), ..Default::default() };
        let c = l.over(&nano);
        assert_eq!((c.arch, c.kv_heads(), c.n_embd), (Arch::Llama, 2, nano.n_embd));
        assert_eq!(l.describe(), "--arch llama --n-kv-head 2");
        c.validate().unwrap();
        let back = ShapeArgs { arch: Some(Arch::Gpt2), ..Default::default() }.over(&GptConfig::llama_micro());
        assert_eq!(back, GptConfig::micro());
    }
}
