//! Streaming DiLoCo's fragments (arXiv 2501.18512, Sec. 2.1): the model cut
//! into P groups of transformer blocks, each synchronised on its own.
//!
//! - `strided` (the paper's default, "mildly" better than sequential in
//!   its ablation): block i goes to fragment i mod P, so every fragment
//!   spans the depth (P = 2 over 4 blocks: {0, 2} and {1, 3}).
//! - `sequential`: consecutive blocks, block i to fragment floor(i P / L)
//!   (P = 2 over 4 blocks: {0, 1} and {2, 3}).
//!
//! The tensors outside the blocks follow a block, our rule (the paper
//! speaks of layers only): the token and position embeddings (`wte`, also
//! the tied LM head, and `wpe`) go with block 0's fragment, the final
//! LayerNorm with the last block's, as they sit next to them in the flat
//! buffer. Every parameter lands in exactly one fragment. A fragment
//! travels as one contiguous buffer: its tensors' ranges in buffer order.

use crate::model::ParamLayout;
use anyhow::{ensure, Result};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// How blocks are dealt to fragments (`fragment_pattern`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FragmentPattern {
    /// Block i to fragment i mod P.
    #[default]
    Strided,
    /// Block i to fragment floor(i P / L).
    Sequential,
}

impl FragmentPattern {
    /// Names as in TOML.
    pub const NAMES: [&'static str; 2] = ["strided", "sequential"];

    /// The name as in TOML.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    /// The fragment of block `i` of `layers`, with `p` fragments.
    pub fn fragment_of(self, i: usize, layers: usize, p: usize) -> usize {
        match self {
            FragmentPattern::Strided => i % p,
            FragmentPattern::Sequential => i * p / layers,
        }
    }
}

/// The flat-buffer ranges of each of P fragments.
#[derive(Clone, Debug, PartialEq)]
pub struct Fragments {
    /// Per fragment, its ranges in buffer order (adjacent ones merged).
    pub ranges: Vec<Vec<Range<usize>>>,
}

impl Fragments {
    /// Cuts `layout`'s blocks into `p` fragments by `pattern`; an error
    /// names the model's block count when `p` is 0 or exceeds it.
    pub fn new(layout: &ParamLayout, p: usize, pattern: FragmentPattern) -> Result<Fragments> {
        let layers = layout.n_layer();
        ensure!(
            (1..=layers).contains(&p),
            "[methods.streaming-diloco]: fragments = {p}, but the model has {layers} transformer blocks and a fragment needs at least one: set fragments between 1 and {layers}, e.g. fragments = {}",
            layers.min(2)
        );
        let mut ranges: Vec<Vec<Range<usize>>> = vec![Vec::new(); p];
        for t in &layout.tensors {
            // Embeddings go with the first block; the final norm (and an
            // untied head, which follows it) with the last.
            let after_blocks = ["ln_f.", "norm.", "lm_head."].iter().any(|s| t.name.starts_with(s));
            let f = match ParamLayout::block_of(&t.name) {
                Some(i) => pattern.fragment_of(i, layers, p),
                None if after_blocks => pattern.fragment_of(layers - 1, layers, p),
                None => pattern.fragment_of(0, layers, p),
            };
            match ranges[f].last_mut() {
                Some(last) if last.end == t.range.start => last.end = t.range.end,
                _ => ranges[f].push(t.range.clone()),
            }
        }
        Ok(Fragments { ranges })
    }

    /// P.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether there are none (never: P >= 1).
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Parameters in fragment `p`.
    pub fn size(&self, p: usize) -> usize {
        self.ranges[p].iter().map(|r| r.len()).sum()
    }

    /// Fragment `p` of `params`, as one contiguous buffer.
    pub fn gather(&self, p: usize, params: &[f32], out: &mut [f32]) {
        let mut at = 0;
        for r in &self.ranges[p] {
            out[at..at + r.len()].copy_from_slice(&params[r.clone()]);
            at += r.len();
        }
    }

    /// Writes fragment `p`'s contiguous `values` back into `params`.
    pub fn scatter(&self, p: usize, values: &[f32], params: &mut [f32]) {
        let mut at = 0;
        for r in &self.ranges[p] {
            params[r.clone()].copy_from_slice(&values[at..at + r.len()]);
            at += r.len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::GptConfig;

    fn four_blocks() -> ParamLayout {
        ParamLayout::new(&GptConfig::gpt2(5, 2, 4, 1, 3))
    }

    /// The fragment of every tensor, by name.
    fn owner(f: &Fragments, l: &ParamLayout, name: &str) -> usize {
        let r = &l.get(name).unwrap().range;
        (0..f.len()).find(|&p| f.ranges[p].iter().any(|x| x.start <= r.start && r.end <= x.end)).unwrap()
    }

    #[test]
    fn strided_and_sequential_deal_blocks_as_the_paper_draws_them() {
        let l = four_blocks();
        let s = Fragments::new(&l, 2, FragmentPattern::Strided).unwrap();
        let q = Fragments::new(&l, 2, FragmentPattern::Sequential).unwrap();
        let blocks =
            |f: &Fragments| (0..4).map(|i| owner(f, &l, &format!("h.{i}.mlp.c_fc.weight"))).collect::<Vec<_>>();
        assert_eq!(blocks(&s), [0, 1, 0, 1]);
        assert_eq!(blocks(&q), [0, 0, 1, 1]);
        // Embeddings with block 0, the final LayerNorm with block 3.
        for f in [&s, &q] {
            assert_eq!((owner(f, &l, "wte.weight"), owner(f, &l, "wpe.weight"), owner(f, &l, "ln_f.bias")), (0, 0, 1));
        }
        // Strided over 4 blocks: wte+wpe+h.0, h.2 in fragment 0; h.1, h.3+ln_f in 1.
        assert_eq!(s.ranges[0].len(), 2);
        assert_eq!(s.ranges[1].len(), 2);
        assert_eq!(q.ranges[0].len(), 1, "sequential: one range per fragment");
        // Three fragments of five blocks, sequential: floor(3i/5) = 0, 0, 1, 1, 2.
        assert_eq!([0, 1, 2, 3, 4].map(|i| FragmentPattern::Sequential.fragment_of(i, 5, 3)), [0, 0, 1, 1, 2]);
    }

    #[test]
    fn llama_blocks_are_dealt_by_their_layer_and_the_head_goes_last() {
        let cfg = GptConfig { n_layer: 4, tie_head: false, ..GptConfig::llama_of(GptConfig::gpt2(5, 4, 4, 2, 3)) };
        let l = ParamLayout::new(&cfg);
        let s = Fragments::new(&l, 2, FragmentPattern::Strided).unwrap();
        let blocks = (0..4).map(|i| owner(&s, &l, &format!("layers.{i}.mlp.up_proj.weight"))).collect::<Vec<_>>();
        assert_eq!(blocks, [0, 1, 0, 1]);
        let ends = ["embed_tokens.weight", "norm.weight", "lm_head.weight"].map(|n| owner(&s, &l, n));
        assert_eq!(ends, [0, 1, 1]);
        assert_eq!(s.ranges.iter().flatten().map(|r| r.len()).sum::<usize>(), l.len);
    }

    #[test]
    fn every_parameter_is_in_exactly_one_fragment_and_gather_scatter_round_trip() {
        let l = four_blocks();
        let x: Vec<f32> = (0..l.len).map(|i| i as f32).collect();
        for pattern in [FragmentPattern::Strided, FragmentPattern::Sequential] {
            for p in 1..=4 {
                let f = Fragments::new(&l, p, pattern).unwrap();
                let mut seen = vec![0; l.len];
                f.ranges.iter().flatten().flat_map(|r| r.clone()).for_each(|i| seen[i] += 1);
                assert!(seen.iter().all(|&c| c == 1), "{pattern:?} P={p}");
                assert_eq!((0..p).map(|q| f.size(q)).sum::<usize>(), l.len);
                let mut back = vec![0.0; l.len];
                for q in 0..p {
                    let mut buf = vec![0.0; f.size(q)];
                    f.gather(q, &x, &mut buf);
                    f.scatter(q, &buf, &mut back);
                }
                assert_eq!(back, x);
            }
        }
    }

    #[test]
    fn more_fragments_than_blocks_is_refused_naming_the_blocks() {
        let e = Fragments::new(&four_blocks(), 5, FragmentPattern::Strided).unwrap_err().to_string();
        assert!(
            e.contains("fragments = 5, but the model has 4 transformer blocks") && e.contains("fragments = 2"),
            "{e}"
        );
        assert!(Fragments::new(&four_blocks(), 0, FragmentPattern::Strided).is_err());
    }
}
