//! Token + learned position embeddings.

use rayon::prelude::*;

/// `out[i] = wte[tokens[i]] + wpe[i % t]` for `tokens: [b*t]`, rows of width `c`.
pub fn forward(out: &mut [f32], tokens: &[u32], wte: &[f32], wpe: &[f32], t: usize, c: usize) {
    out[..tokens.len() * c].par_chunks_mut(c).zip(tokens.par_iter()).enumerate().for_each(|(i, (row, &tok))| {
        let (e, p) = (&wte[tok as usize * c..][..c], &wpe[(i % t) * c..][..c]);
        for ((o, e), p) in row.iter_mut().zip(e).zip(p) {
            *o = e + p;
        }
    });
}

/// Accumulate `dwte[tokens[i]] += dout[i]` and `dwpe[i % t] += dout[i]`.
/// Sequential in row order: a token repeated in the batch is added in the
/// same order every run (bit-reproducible), and this is ~0.1% of a step.
pub fn backward(dwte: &mut [f32], dwpe: &mut [f32], dout: &[f32], tokens: &[u32], t: usize, c: usize) {
    for (i, (row, &tok)) in dout.chunks_exact(c).zip(tokens).enumerate() {
        for (d, g) in dwte[tok as usize * c..][..c].iter_mut().zip(row) {
            *d += g;
        }
        for (d, g) in dwpe[(i % t) * c..][..c].iter_mut().zip(row) {
            *d += g;
        }
    }
}

/// Token embedding alone (llama: positions are rotary, in attention):
/// `out[i] = wte[tokens[i]]`.
pub fn forward_tokens(out: &mut [f32], tokens: &[u32], wte: &[f32], c: usize) {
    out[..tokens.len() * c].par_chunks_mut(c).zip(tokens.par_iter()).for_each(|(row, &tok)| {
        row.copy_from_slice(&wte[tok as usize * c..][..c]);
    });
}

/// Accumulate `dwte[tokens[i]] += dout[i]`, sequential in row order like [`backward`].
pub fn backward_tokens(dwte: &mut [f32], dout: &[f32], tokens: &[u32], c: usize) {
    for (row, &tok) in dout.chunks_exact(c).zip(tokens) {
        for (d, g) in dwte[tok as usize * c..][..c].iter_mut().zip(row) {
            *d += g;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_by_hand() {
        // vocab 3, c 2, t 2; tokens [2, 0]
        let wte = [0.0, 1.0, 10.0, 11.0, 20.0, 21.0];
        let wpe = [0.5, 0.5, 0.25, 0.25];
        let mut out = [0.0; 4];
        forward(&mut out, &[2, 0], &wte, &wpe, 2, 2);
        assert_eq!(out, [20.5, 21.5, 0.25, 1.25]);
        let (mut dwte, mut dwpe) = ([0.0; 6], [0.0; 4]);
        backward(&mut dwte, &mut dwpe, &[1.0, 2.0, 3.0, 4.0], &[2, 2], 2, 2);
        assert_eq!(dwte, [0.0, 0.0, 0.0, 0.0, 4.0, 6.0]);
        assert_eq!(dwpe, [1.0, 2.0, 3.0, 4.0]);
        forward_tokens(&mut out, &[2, 0], &wte, 2);
        assert_eq!(out, [20.0, 21.0, 0.0, 1.0]);
        let mut dwte = [0.0; 6];
        backward_tokens(&mut dwte, &[1.0, 2.0, 3.0, 4.0], &[2, 2], 2);
        assert_eq!(dwte, [0.0, 0.0, 0.0, 0.0, 4.0, 6.0]);
    }

    #[test]
    fn embedding_backward_matches_finite_differences() {
        use crate::model::ops::gradcheck::{check_op, probe};
        let (v, c, t) = (5, 3, 4);
        let tokens = [1u32, 4, 1, 0, 2, 2, 3, 1]; // b = 2, repeated ids accumulate
        check_op(
            &[probe(v * c, 1.1), probe(t * c, 2.3)],
            |ins| {
                let mut out = vec![0.0; tokens.len() * c];
                forward(&mut out, &tokens, &ins[0], &ins[1], t, c);
                (out, ())
            },
            |ins, dy, _| {
                let (mut dwte, mut dwpe) = (vec![0.0; ins[0].len()], vec![0.0; ins[1].len()]);
                backward(&mut dwte, &mut dwpe, dy, &tokens, t, c);
                vec![dwte, dwpe]
            },
        );
    }
}
