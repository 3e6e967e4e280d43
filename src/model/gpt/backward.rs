//! The GPT's backward pass (gpt.rs has the forward and the module docs):
//! every kernel of the forward, in reverse, accumulating into the flat
//! gradient buffer.

use super::{two_mut, Gpt};
use crate::model::ops::{attention, embedding, gelu, layernorm, matmul};
use crate::model::profile::Timer;
use crate::model::random::dropout_backward;

impl Gpt {
    /// Backward of the last training forward; `acts.logits` holds dL/dlogits.
    pub(super) fn backward(&mut self, b: usize, t: usize) {
        let cfg = &self.cfg;
        let (n, c, v) = (b * t, cfg.n_embd, cfg.vocab_size);
        let dims = attention::Dims::mha(b, t, c, cfg.n_head);
        let p = &self.params;
        let l = &self.layout;
        let g = &mut self.grads;
        let a = &mut self.acts;
        let dropout = cfg.dropout > 0.0;
        let mut tm = Timer::start();
        // Head: logits = lnf wte^T
        matmul::linear_backward(
            Some(&mut a.dln),
            &mut g[l.wte.clone()],
            None,
            &a.logits[..n * v],
            &a.lnf[..n * c],
            &p[l.wte.clone()],
            n,
            c,
            v,
        );
        tm.mark("matmul lm-head bwd");
        let dres = &mut a.dres[..n * c];
        dres.fill(0.0);
        let last = a.blocks.last().map_or(&a.x0, |s| &s.res2);
        let (dw, db) = two_mut(g, &l.lnf_w, &l.lnf_b);
        layernorm::backward(
            dres,
            dw,
            db,
            &a.dln[..n * c],
            &last[..n * c],
            &p[l.lnf_w.clone()],
            &a.lnf_mean,
            &a.lnf_rstd,
            c,
        );
        tm.mark("layernorm bwd");
        for (i, r) in l.blocks.iter().enumerate().rev() {
            let (done, rest) = a.blocks.split_at(i);
            let x: &[f32] = if i == 0 { &a.x0[..n * c] } else { &done[i - 1].res2[..n * c] };
            let s = &rest[0];
            // MLP branch: res2 = res1 + drop(fcproj(gelu(fc(ln2(res1)))))
            let dbranch = dropout_backward(&mut a.dbranch[..n * c], dres, &s.mask_mlp, dropout);
            tm.mark("residual+dropout bwd");
            let (dw, db) = two_mut(g, &r.fcproj_w, &r.fcproj_b);
            matmul::linear_backward(
                Some(&mut a.dfch_gelu),
                dw,
                Some(db),
                dbranch,
                &s.fch_gelu[..n * 4 * c],
                &p[r.fcproj_w.clone()],
                n,
                4 * c,
                c,
            );
            tm.mark("matmul fc-proj bwd");
            gelu::backward(&mut a.dfch, &s.fch[..n * 4 * c], &a.dfch_gelu[..n * 4 * c]);
            tm.mark("gelu bwd");
            let (dw, db) = two_mut(g, &r.fc_w, &r.fc_b);
            matmul::linear_backward(
                Some(&mut a.dln),
                dw,
                Some(db),
                &a.dfch[..n * 4 * c],
                &s.ln2[..n * c],
                &p[r.fc_w.clone()],
                n,
                c,
                4 * c,
            );
            tm.mark("matmul fc bwd");
            let (dw, db) = two_mut(g, &r.ln2_w, &r.ln2_b);
            layernorm::backward(
                dres,
                dw,
                db,
                &a.dln[..n * c],
                &s.res1[..n * c],
                &p[r.ln2_w.clone()],
                &s.ln2_mean,
                &s.ln2_rstd,
                c,
            );
            tm.mark("layernorm bwd");
            // Attention branch: res1 = x + drop(proj(attn(ln1(x))))
            let dbranch = dropout_backward(&mut a.dbranch[..n * c], dres, &s.mask_attn, dropout);
            tm.mark("residual+dropout bwd");
            let (dw, db) = two_mut(g, &r.proj_w, &r.proj_b);
            matmul::linear_backward(
                Some(&mut a.datty),
                dw,
                Some(db),
                dbranch,
                &s.atty[..n * c],
                &p[r.proj_w.clone()],
                n,
                c,
                c,
            );
            tm.mark("matmul attn-proj bwd");
            attention::backward(&mut a.dqkv, &mut a.dprobs, &a.datty[..n * c], &s.qkv[..n * 3 * c], &s.probs, dims);
            tm.mark("attention bwd");
            let (dw, db) = two_mut(g, &r.qkv_w, &r.qkv_b);
            matmul::linear_backward(
                Some(&mut a.dln),
                dw,
                Some(db),
                &a.dqkv[..n * 3 * c],
                &s.ln1[..n * c],
                &p[r.qkv_w.clone()],
                n,
                c,
                3 * c,
            );
            tm.mark("matmul qkv bwd");
            let (dw, db) = two_mut(g, &r.ln1_w, &r.ln1_b);
            layernorm::backward(dres, dw, db, &a.dln[..n * c], x, &p[r.ln1_w.clone()], &s.ln1_mean, &s.ln1_rstd, c);
            tm.mark("layernorm bwd");
        }
        let dx0 = dropout_backward(&mut a.dbranch[..n * c], dres, &a.mask_emb, dropout);
        let (dwte, dwpe) = two_mut(g, &l.wte, &l.wpe);
        embedding::backward(dwte, dwpe, dx0, &a.tokens[..n], t, c);
        tm.mark("embedding bwd");
    }
}
