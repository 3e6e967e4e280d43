//! The flat parameter layout: every tensor of the model is a named range of
//! one contiguous f32 buffer, in a fixed order.
//!
//! Strategies communicate and optimise the flat buffer (an all-reduce of the
//! gradients is one call; a ZeRO-1 shard is one range); only the model and
//! the exporters care where each tensor lives. GPT-2 names follow GPT-2's
//! (`h.{i}.attn.c_attn.weight`, ...) but weights keep `nn.Linear`'s
//! `[out, in]` layout; the Hugging Face exporter transposes. Llama names
//! are Hugging Face's `LlamaForCausalLM` names without the `model.` prefix
//! (`layers.{i}.self_attn.q_proj.weight`, ...), in the same `[out, in]`
//! layout as there.

use super::config::Arch;
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
    /// never biases, norm parameters or the position embedding).
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

/// Offsets of one llama block's tensors. q, k and v are consecutive (one
/// `[c + 2 kv, c]` matrix, `qkv`), and so are gate and up (`[2 f, c]`,
/// `gate_up`): each pair or triple is one product in the forward.
#[derive(Clone, Debug)]
pub struct LlamaBlockRanges {
    /// `input_layernorm.weight` (RMSNorm before attention).
    pub attn_norm: Range<usize>,
    /// `q_proj`, `k_proj`, `v_proj` together.
    pub qkv: Range<usize>,
    /// `o_proj.weight`.
    pub o: Range<usize>,
    /// `post_attention_layernorm.weight` (RMSNorm before the MLP).
    pub mlp_norm: Range<usize>,
    /// `gate_proj` and `up_proj` together.
    pub gate_up: Range<usize>,
    /// `down_proj.weight`.
    pub down: Range<usize>,
}

/// The full layout.
#[derive(Clone, Debug)]
pub struct ParamLayout {
    /// Every tensor, in buffer order.
    pub tensors: Vec<TensorSpec>,
    /// Token embedding `[vocab, c]` (`wte.weight`; llama: `embed_tokens.weight`);
    /// also the LM head when tied.
    pub wte: Range<usize>,
    /// Position embedding `[ctx, c]` (GPT-2; empty for llama).
    pub wpe: Range<usize>,
    /// Per-block ranges (GPT-2; empty for llama).
    pub blocks: Vec<BlockRanges>,
    /// Per-block ranges (llama; empty for GPT-2).
    pub llama_blocks: Vec<LlamaBlockRanges>,
    /// Final norm's weight (`ln_f.weight`; llama: `norm.weight`).
    pub lnf_w: Range<usize>,
    /// Final LayerNorm's bias (GPT-2; empty for llama).
    pub lnf_b: Range<usize>,
    /// The untied LM head `lm_head.weight` `[vocab, c]` (llama with `tie_head = false`).
    pub lm_head: Option<Range<usize>>,
    /// Total number of parameters.
    pub len: usize,
}

impl ParamLayout {
    /// Lay out the tensors of `cfg` in their fixed order.
    pub fn new(cfg: &GptConfig) -> Self {
        if cfg.arch == Arch::Llama {
            return Self::llama(cfg);
        }
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
        Self { tensors, wte, wpe, blocks, llama_blocks: Vec::new(), lnf_w, lnf_b, lm_head: None, len }
    }

    /// The llama layout: `embed_tokens`, the blocks, `norm`, and
    /// `lm_head` when untied; matrices decay, norm weights do not.
    fn llama(cfg: &GptConfig) -> Self {
        let (v, c, kv, f) = (cfg.vocab_size, cfg.n_embd, cfg.kv_width(), cfg.ffn_width());
        let mut tensors = Vec::new();
        let mut push = |name: String, shape: Vec<usize>, decay: bool| {
            let start = tensors.last().map_or(0, |s: &TensorSpec| s.range.end);
            let range = start..start + shape.iter().product::<usize>();
            tensors.push(TensorSpec { name, shape, range: range.clone(), decay });
            range
        };
        let wte = push("embed_tokens.weight".into(), vec![v, c], true);
        let mut llama_blocks = Vec::new();
        for i in 0..cfg.n_layer {
            let mut p =
                |suffix: &str, shape: Vec<usize>, decay: bool| push(format!("layers.{i}.{suffix}"), shape, decay);
            let attn_norm = p("input_layernorm.weight", vec![c], false);
            let q = p("self_attn.q_proj.weight", vec![c, c], true);
            p("self_attn.k_proj.weight", vec![kv, c], true);
            let vv = p("self_attn.v_proj.weight", vec![kv, c], true);
            let o = p("self_attn.o_proj.weight", vec![c, c], true);
            let mlp_norm = p("post_attention_layernorm.weight", vec![c], false);
            let gate = p("mlp.gate_proj.weight", vec![f, c], true);
            let up = p("mlp.up_proj.weight", vec![f, c], true);
            let down = p("mlp.down_proj.weight", vec![c, f], true);
            llama_blocks.push(LlamaBlockRanges {
                attn_norm,
                qkv: q.start..vv.end,
                o,
                mlp_norm,
                gate_up: gate.start..up.end,
                down,
            });
        }
        let lnf_w = push("norm.weight".into(), vec![c], false);
        let lm_head = (!cfg.tied()).then(|| push("lm_head.weight".into(), vec![v, c], true));
        let len = lm_head.as_ref().unwrap_or(&lnf_w).end;
        let (wpe, lnf_b) = (wte.end..wte.end, lnf_w.end..lnf_w.end);
        Self { tensors, wte, wpe, blocks: Vec::new(), llama_blocks, lnf_w, lnf_b, lm_head, len }
    }

    /// Number of transformer blocks.
    pub fn n_layer(&self) -> usize {
        self.blocks.len().max(self.llama_blocks.len())
    }

    /// The block a tensor belongs to, from its name (`h.{i}.` or
    /// `layers.{i}.`); `None` for the embeddings, final norm and head.
    pub fn block_of(name: &str) -> Option<usize> {
        let rest = name.strip_prefix("h.").or_else(|| name.strip_prefix("layers."))?;
        rest.split('.').next()?.parse().ok()
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

    #[test]
    fn llama_layout_uses_hf_names_and_counts_parameters() {
        let cfg = GptConfig::llama_nano();
        let l = ParamLayout::new(&cfg);
        let mut end = 0;
        for t in &l.tensors {
            assert_eq!(t.range.start, end, "{} leaves a gap", t.name);
            assert_eq!(t.decay, t.shape.len() == 2, "{}: only matrices decay", t.name);
            end = t.range.end;
        }
        // embed 2048*128 + 2 * (2*128 norms + 2*128^2 q,o + 2*64*128 k,v + 3*384*128 MLP) + 128 norm
        let block = 2 * 128 + 2 * 128 * 128 + 2 * 64 * 128 + 3 * 384 * 128;
        assert_eq!(l.len, 2048 * 128 + 2 * block + 128);
        assert_eq!(l.get("layers.1.self_attn.k_proj.weight").unwrap().shape, [64, 128]);
        assert!(l.get("layers.0.mlp.gate_proj.weight").is_some() && l.get("lm_head.weight").is_none());
        let b = &l.llama_blocks[1];
        assert_eq!(b.qkv.len(), (128 + 2 * 64) * 128);
        assert_eq!(l.get("layers.1.mlp.up_proj.weight").unwrap().range.end, b.gate_up.end);
        assert_eq!((l.n_layer(), l.lnf_w.clone()), (2, l.get("norm.weight").unwrap().range.clone()));
        let untied = ParamLayout::new(&GptConfig { tie_head: false, ..cfg });
        assert_eq!(untied.lm_head, Some(l.len..l.len + 2048 * 128));
        assert_eq!((untied.len, untied.tensors.last().unwrap().name.as_str()), (l.len + 2048 * 128, "lm_head.weight"));
        assert_eq!(ParamLayout::block_of("layers.12.mlp.up_proj.weight"), Some(12));
        assert_eq!(ParamLayout::block_of("h.3.ln_1.bias"), Some(3));
        assert_eq!(ParamLayout::block_of("norm.weight"), None);
    }
}
