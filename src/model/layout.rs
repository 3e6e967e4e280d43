//! The flat parameter layout: every tensor of the model is a named range of
//! one contiguous f32 buffer, in a fixed order.
//!
//! Strategies communicate and optimise the flat buffer (an all-reduce of the
//! gradients is one call; a ZeRO-1 shard is one range); only the model and
//! the exporters care where each tensor lives. Names follow GPT-2's
//! (`h.{i}.attn.c_attn.weight`, ...) but weights keep `nn.Linear`'s
//! `[out, in]` layout; the Hugging Face exporter transposes.

use super::GptConfig;
use std::ops::Range;

/// One tensor of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSpec {
    /// GPT-2 style name, e.g. `h.0.mlp.c_fc.weight`.
    pub name: String,
    /// Shape, row-major.
    pub shape: Vec<usize>,
    /// Where it lives in the flat buffer.
    pub range: Range<usize>,
    /// Whether AdamW's weight decay applies by default (matrices only;
    /// never biases, LayerNorm parameters or the position embedding).
    pub decay: bool,
}

/// Offsets of one block's tensors (relative to the flat buffer).
#[derive(Clone, Debug)]
pub struct BlockRanges {
    pub ln1_w: Range<usize>,
    pub ln1_b: Range<usize>,
    pub qkv_w: Range<usize>,
    pub qkv_b: Range<usize>,
    pub proj_w: Range<usize>,
    pub proj_b: Range<usize>,
    pub ln2_w: Range<usize>,
    pub ln2_b: Range<usize>,
    pub fc_w: Range<usize>,
    pub fc_b: Range<usize>,
    pub fcproj_w: Range<usize>,
    pub fcproj_b: Range<usize>,
}

/// The full layout.
#[derive(Clone, Debug)]
pub struct ParamLayout {
    /// Every tensor, in buffer order.
    pub tensors: Vec<TensorSpec>,
    /// Token embedding `[vocab, c]` (also the LM head: weights are tied).
    pub wte: Range<usize>,
    /// Position embedding `[ctx, c]`.
    pub wpe: Range<usize>,
    /// Per-block ranges.
    pub blocks: Vec<BlockRanges>,
    /// Final LayerNorm.
    pub lnf_w: Range<usize>,
    pub lnf_b: Range<usize>,
    /// Total number of parameters.
    pub len: usize,
}

impl ParamLayout {
    /// Lay out the tensors of `cfg` in their fixed order.
    pub fn new(cfg: &GptConfig) -> Self {
        let (v, c, t) = (cfg.vocab_size, cfg.n_embd, cfg.ctx);
        let mut tensors = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, decay: bool| {
            let start = tensors.last().map_or(0, |s: &TensorSpec| s.range.end);
            let range = start..start + shape.iter().product::<usize>();
            tensors.push(TensorSpec { name, shape, range: range.clone(), decay });
            range
        };
        let wte = push("wte.weight".into(), vec![v, c], true);
        let wpe = push("wpe.weight".into(), vec![t, c], false);
        let mut blocks = Vec::new();
        for i in 0..cfg.n_layer {
            let mut p = |suffix: &str, shape: Vec<usize>, decay: bool| push(format!("h.{i}.{suffix}"), shape, decay);
            blocks.push(BlockRanges {
                ln1_w: p("ln_1.weight", vec![c], false),
                ln1_b: p("ln_1.bias", vec![c], false),
                qkv_w: p("attn.c_attn.weight", vec![3 * c, c], true),
                qkv_b: p("attn.c_attn.bias", vec![3 * c], false),
                proj_w: p("attn.c_proj.weight", vec![c, c], true),
                proj_b: p("attn.c_proj.bias", vec![c], false),
                ln2_w: p("ln_2.weight", vec![c], false),
                ln2_b: p("ln_2.bias", vec![c], false),
                fc_w: p("mlp.c_fc.weight", vec![4 * c, c], true),
                fc_b: p("mlp.c_fc.bias", vec![4 * c], false),
                fcproj_w: p("mlp.c_proj.weight", vec![c, 4 * c], true),
                fcproj_b: p("mlp.c_proj.bias", vec![c], false),
            });
        }
        let lnf_w = push("ln_f.weight".into(), vec![c], false);
        let lnf_b = push("ln_f.bias".into(), vec![c], false);
        let len = lnf_b.end;
        Self { tensors, wte, wpe, blocks, lnf_w, lnf_b, len }
    }

    /// Ranges that take weight decay, in buffer order.
    pub fn decay_ranges(&self) -> Vec<Range<usize>> {
        self.tensors.iter().filter(|t| t.decay).map(|t| t.range.clone()).collect()
    }

    /// Find a tensor by name.
    pub fn get(&self, name: &str) -> Option<&TensorSpec> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_contiguous_and_counts_parameters() {
        let cfg = GptConfig::micro();
        let l = ParamLayout::new(&cfg);
        let mut end = 0;
        for t in &l.tensors {
            assert_eq!(t.range.start, end, "{} leaves a gap", t.name);
            end = t.range.end;
        }
        // micro: wte 4096*256 + wpe 128*256 + 4 * (12*256^2 + 13*256) + 2*256
        let want = 4096 * 256 + 128 * 256 + 4 * (12 * 256 * 256 + 13 * 256) + 2 * 256;
        assert_eq!(l.len, want);
        assert_eq!(l.len, 4_240_896);
        assert!(l.get("h.3.mlp.c_proj.bias").is_some());
    }
}
