//! Buffers the forward pass saves for the backward, and the backward's
//! scratch space. Allocated once for the largest (batch, seq) seen and then
//! reused: first-touch page faults cost ~10x a copy on these VMs.

use super::GptConfig;

/// What one transformer block saves.
#[derive(Default)]
pub struct BlockActs {
    pub ln1: Vec<f32>,
    pub ln1_mean: Vec<f32>,
    pub ln1_rstd: Vec<f32>,
    pub qkv: Vec<f32>,
    pub probs: Vec<f32>,
    pub atty: Vec<f32>,
    /// Residual stream after the attention branch.
    pub res1: Vec<f32>,
    pub ln2: Vec<f32>,
    pub ln2_mean: Vec<f32>,
    pub ln2_rstd: Vec<f32>,
    pub fch: Vec<f32>,
    pub fch_gelu: Vec<f32>,
    /// Residual stream after the MLP branch: the next block's input.
    pub res2: Vec<f32>,
    /// Dropout keep-masks (0 or 1/(1-p)) of the two branches; empty when p = 0.
    pub mask_attn: Vec<f32>,
    pub mask_mlp: Vec<f32>,
}

/// All saved activations plus backward scratch, for up to `rows` tokens.
#[derive(Default)]
pub struct Activations {
    /// Capacity in tokens (batch x seq) and in attention-probability entries.
    pub rows: usize,
    pub probs_len: usize,
    /// Inputs of the last forward, needed by the embedding backward.
    pub tokens: Vec<u32>,
    /// Embedding output (the first block's input) and its dropout mask.
    pub x0: Vec<f32>,
    pub mask_emb: Vec<f32>,
    pub blocks: Vec<BlockActs>,
    pub lnf: Vec<f32>,
    pub lnf_mean: Vec<f32>,
    pub lnf_rstd: Vec<f32>,
    /// Logits `[rows, vocab]`; after a training forward they hold d(loss)/d(logits).
    pub logits: Vec<f32>,
    pub losses: Vec<f32>,
    /// Output of a branch (attention or MLP projection) before the residual add.
    pub branch: Vec<f32>,
    // Backward scratch.
    pub dres: Vec<f32>,
    pub dbranch: Vec<f32>,
    pub dln: Vec<f32>,
    pub dqkv: Vec<f32>,
    pub dprobs: Vec<f32>,
    pub datty: Vec<f32>,
    pub dfch_gelu: Vec<f32>,
    pub dfch: Vec<f32>,
}

impl Activations {
    /// Make room for `b` sequences of `t` tokens; a no-op when it fits.
    pub fn ensure(&mut self, cfg: &GptConfig, b: usize, t: usize) {
        let rows = b * t;
        let probs_len = b * cfg.n_head * t * t;
        if rows <= self.rows && probs_len <= self.probs_len {
            return;
        }
        let (rows, probs_len) = (rows.max(self.rows), probs_len.max(self.probs_len));
        let (c, v) = (cfg.n_embd, cfg.vocab_size);
        let masks = if cfg.dropout > 0.0 { rows * c } else { 0 };
        let z = |n: usize| vec![0.0f32; n];
        *self = Activations {
            rows,
            probs_len,
            tokens: vec![0; rows],
            x0: z(rows * c),
            mask_emb: z(masks),
            blocks: (0..cfg.n_layer)
                .map(|_| BlockActs {
                    ln1: z(rows * c),
                    ln1_mean: z(rows),
                    ln1_rstd: z(rows),
                    qkv: z(rows * 3 * c),
                    probs: z(probs_len),
                    atty: z(rows * c),
                    res1: z(rows * c),
                    ln2: z(rows * c),
                    ln2_mean: z(rows),
                    ln2_rstd: z(rows),
                    fch: z(rows * 4 * c),
                    fch_gelu: z(rows * 4 * c),
                    res2: z(rows * c),
                    mask_attn: z(masks),
                    mask_mlp: z(masks),
                })
                .collect(),
            lnf: z(rows * c),
            lnf_mean: z(rows),
            lnf_rstd: z(rows),
            logits: z(rows * v),
            losses: z(rows),
            branch: z(rows * c),
            dres: z(rows * c),
            dbranch: z(rows * c),
            dln: z(rows * c),
            dqkv: z(rows * 3 * c),
            dprobs: z(probs_len),
            datty: z(rows * c),
            dfch_gelu: z(rows * 4 * c),
            dfch: z(rows * 4 * c),
        };
    }

    /// Bytes [`Activations::ensure`] allocates for `b` sequences of `t`
    /// tokens, computed without allocating (in f64: no overflow for any
    /// size asked), for the memory check before a run (train/memory.rs).
    /// Llama models hold [`super::llama::Acts`] instead.
    pub fn bytes_for(cfg: &GptConfig, b: usize, t: usize) -> f64 {
        if cfg.arch == super::Arch::Llama {
            return super::llama::Acts::bytes_for(cfg, b, t);
        }
        let (b, t) = (b as f64, t as f64);
        let (c, v, l, h) = (cfg.n_embd as f64, cfg.vocab_size as f64, cfg.n_layer as f64, cfg.n_head as f64);
        let (rows, probs) = (b * t, b * h * t * t);
        let rc = rows * c;
        let masks = if cfg.dropout > 0.0 { rc } else { 0.0 };
        // Per block: ln1, qkv (3), atty, res1, ln2, fch (4), fch_gelu (4), res2; 2 x 2 norm
        // statistics; probs; two dropout masks.
        let block = 16.0 * rc + 4.0 * rows + probs + 2.0 * masks;
        // x0, lnf, branch, dres, dbranch, dln, dqkv (3), datty, dfch_gelu (4), dfch (4); lnf
        // statistics and losses; logits; dprobs; the embedding's mask.
        let top = 18.0 * rc + 3.0 * rows + rows * v + probs + masks;
        4.0 * (l * block + top) + 4.0 * rows
    }

    /// Bytes held, for memory reports.
    pub fn bytes(&self) -> usize {
        let b = &self.blocks;
        let per_block: usize = b
            .iter()
            .map(|a| {
                [
                    &a.ln1,
                    &a.ln1_mean,
                    &a.ln1_rstd,
                    &a.qkv,
                    &a.probs,
                    &a.atty,
                    &a.res1,
                    &a.ln2,
                    &a.ln2_mean,
                    &a.ln2_rstd,
                    &a.fch,
                    &a.fch_gelu,
                    &a.res2,
                    &a.mask_attn,
                    &a.mask_mlp,
                ]
                .iter()
                .map(|v| v.len())
                .sum::<usize>()
            })
            .sum();
        let top = [
            &self.x0,
            &self.mask_emb,
            &self.lnf,
            &self.lnf_mean,
            &self.lnf_rstd,
            &self.logits,
            &self.losses,
            &self.branch,
            &self.dres,
            &self.dbranch,
            &self.dln,
            &self.dqkv,
            &self.dprobs,
            &self.datty,
            &self.dfch_gelu,
            &self.dfch,
        ]
        .iter()
        .map(|v| v.len())
        .sum::<usize>();
        4 * (per_block + top) + 4 * self.tokens.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formula is what `ensure` allocates, to the byte.
    #[test]
    fn bytes_for_is_what_ensure_allocates() {
        let nano = GptConfig::nano();
        let dropout = GptConfig { dropout: 0.1, n_layer: 3, ..GptConfig::nano() };
        for (cfg, b, t) in [(&nano, 2, 16), (&nano, 3, nano.ctx), (&dropout, 1, 7)] {
            let mut a = Activations::default();
            a.ensure(cfg, b, t);
            assert_eq!(Activations::bytes_for(cfg, b, t), a.bytes() as f64, "{cfg:?} {b}x{t}");
        }
        let llama = GptConfig::llama_nano();
        let untied = GptConfig { tie_head: false, n_kv_head: Some(1), ..GptConfig::llama_nano() };
        for (cfg, b, t) in [(&llama, 2, 16), (&untied, 3, llama.ctx)] {
            let mut a = super::super::llama::Acts::default();
            a.ensure(cfg, b, t);
            assert_eq!(Activations::bytes_for(cfg, b, t), a.bytes() as f64, "{cfg:?} {b}x{t}");
        }
    }
}
