//! Rotary position embeddings (RoPE) on the q and k heads of a packed
//! `qkv` buffer, in Hugging Face's `rotate_half` convention: in a head of
//! width hs, element d < hs/2 pairs with d + hs/2 and, at position p,
//!
//!   y[d]        = x[d] cos(p w_d) - x[d + hs/2] sin(p w_d)
//!   y[d + hs/2] = x[d + hs/2] cos(p w_d) + x[d] sin(p w_d)
//!
//! with w_d = theta^(-2d / hs). So Llama weights from Hugging Face need no
//! permutation. A rotation is linear and orthogonal: the backward is the
//! same rotation by -p w_d, applied in place to the gradient.

use rayon::prelude::*;

/// cos and sin of every (position, frequency), `[t, hs/2]` each.
#[derive(Clone, Debug, Default)]
pub struct Table {
    pub hs: usize,
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

impl Table {
    /// The table for heads of width `hs` (even) and positions `0..t`.
    /// Angles in f64, then rounded: the same bits on every machine.
    pub fn new(t: usize, hs: usize, theta: f32) -> Table {
        let half = hs / 2;
        let (mut cos, mut sin) = (Vec::with_capacity(t * half), Vec::with_capacity(t * half));
        for p in 0..t {
            for d in 0..half {
                // inv_freq as Hugging Face computes it: 1 / theta^(2d / hs), in f32
                let inv = 1.0 / (theta as f64).powf((2 * d) as f64 / hs as f64) as f32;
                let a = p as f64 * inv as f64;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Table { hs, cos, sin }
    }

    /// Positions the table covers.
    pub fn len(&self) -> usize {
        self.cos.len() / (self.hs / 2).max(1)
    }

    /// Whether it covers no position.
    pub fn is_empty(&self) -> bool {
        self.cos.is_empty()
    }
}

/// Rotate the first `heads` heads of every row of `buf` (rows of `ld`
/// values, `t` rows per sequence: row `i` is position `i % t`), in place;
/// `inverse` rotates by the negative angle (the backward).
pub fn apply(buf: &mut [f32], ld: usize, heads: usize, t: usize, table: &Table, inverse: bool) {
    let (hs, half) = (table.hs, table.hs / 2);
    assert!(table.len() >= t, "rotary table covers {} positions, not {t}", table.len());
    buf.par_chunks_mut(ld * t).for_each(|seq| {
        for (p, row) in seq.chunks_exact_mut(ld).enumerate() {
            let (cos, sin) = (&table.cos[p * half..(p + 1) * half], &table.sin[p * half..(p + 1) * half]);
            for head in row[..heads * hs].chunks_exact_mut(hs) {
                let (a, b) = head.split_at_mut(half);
                for (((a, b), &c), &s) in a.iter_mut().zip(b).zip(cos).zip(sin) {
                    let s = if inverse { -s } else { s };
                    let (x, y) = (*a, *b);
                    *a = x * c - y * s;
                    *b = y * c + x * s;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::gradcheck::{check_op, probe};

    #[test]
    fn rope_by_hand() {
        // hs = 4, theta = 10000: w = [1, 1/100]. At position 1, element 0
        // pairs with 2 (angle 1), element 1 with 3 (angle 0.01).
        let table = Table::new(2, 4, 10000.0);
        let mut buf = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
        apply(&mut buf, 4, 1, 2, &table, false);
        assert_eq!(&buf[..4], &[1.0, 2.0, 3.0, 4.0], "position 0 is not rotated");
        let (c1, s1, c2, s2) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let want = [c1 - 3.0 * s1, 2.0 * c2 - 4.0 * s2, 3.0 * c1 + s1, 4.0 * c2 + 2.0 * s2];
        for (a, b) in buf[4..].iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{buf:?}");
        }
        apply(&mut buf, 4, 1, 2, &table, true);
        for (a, b) in buf[4..].iter().zip([1.0, 2.0, 3.0, 4.0]) {
            assert!((a - b).abs() < 1e-6, "the inverse undoes it: {buf:?}");
        }
    }

    #[test]
    fn rope_backward_matches_finite_differences() {
        // 2 sequences of 3 tokens, rows of 10: two heads of 4 rotated, 2 left alone.
        let (t, ld, heads) = (3, 10, 2);
        let table = Table::new(t, 4, 10000.0);
        check_op(
            &[probe(2 * t * ld, 1.3)],
            |ins| {
                let mut y = ins[0].clone();
                apply(&mut y, ld, heads, t, &table, false);
                (y, ())
            },
            |_, dy, _| {
                let mut dx = dy.to_vec();
                apply(&mut dx, ld, heads, t, &table, true);
                vec![dx]
            },
        );
    }
}
