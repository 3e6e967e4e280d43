//! The model's random draws: dropout's keep-masks (inverted dropout) and
//! the normal initialisation, both from a seeded PCG stream.

use rand::Rng;
use rand_pcg::Pcg64;

/// Inverted dropout: keep with probability 1-p and scale by 1/(1-p), so
/// evaluation needs no rescaling. The mask is saved for the backward.
pub(super) fn dropout_forward(x: &mut [f32], mask: &mut [f32], p: f32, rng: &mut Pcg64) {
    if let Some(mask) = dropout_mask(mask, x.len(), p, rng) {
        for (x, m) in x.iter_mut().zip(mask) {
            *x *= m;
        }
    }
}

/// Draw dropout's keep-and-scale factors (`0` or `1/(1-p)`) for `len`
/// values into `mask`, in order from `rng`; `None` (and no draws) when off.
pub(super) fn dropout_mask<'a>(mask: &'a mut [f32], len: usize, p: f32, rng: &mut Pcg64) -> Option<&'a [f32]> {
    if p <= 0.0 {
        return None;
    }
    let keep = 1.0 / (1.0 - p);
    for m in &mut mask[..len] {
        *m = if rng.random::<f32>() < p { 0.0 } else { keep };
    }
    Some(&mask[..len])
}

/// Gradient through dropout: `dy * mask`, or `dy` itself when off.
pub(super) fn dropout_backward<'a>(scratch: &'a mut [f32], dy: &'a [f32], mask: &[f32], on: bool) -> &'a [f32] {
    if !on {
        return dy;
    }
    for ((s, d), m) in scratch.iter_mut().zip(dy).zip(mask) {
        *s = d * m;
    }
    scratch
}

/// Fill with N(0, std^2) by Box-Muller: two uniforms -> two normals.
pub(super) fn fill_normal(out: &mut [f32], std: f32, rng: &mut Pcg64) {
    for pair in out.chunks_mut(2) {
        let u1: f64 = 1.0 - rng.random::<f64>(); // (0, 1]: log is finite
        let u2: f64 = rng.random::<f64>();
        let r = (-2.0 * u1.ln()).sqrt();
        let th = 2.0 * std::f64::consts::PI * u2;
        pair[0] = (r * th.cos()) as f32 * std;
        if let Some(x) = pair.get_mut(1) {
            *x = (r * th.sin()) as f32 * std;
        }
    }
}
