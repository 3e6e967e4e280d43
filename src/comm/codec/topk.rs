//! `topk:K+2bit`: of each chunk, the K elements of largest magnitude, each
//! sent as its index and 2 bits (sign, and which of the chunk's two
//! magnitudes); every other element decodes to zero.
//!
//! SparseLoCo (Templar, arXiv 2508.15706) sends top-k of the pseudo-gradient
//! quantised to 2 bits with error feedback; how the 2 bits map to values is
//! our choice: the K kept magnitudes, ranked, split into a lower and an
//! upper half, each sent as its mean (`lo`, `hi`; one value kept: both are
//! it). So a chunk travels as lo, hi (f32), K indices (u16, ascending) and
//! K codes (4 per byte, the first in the low bits; bit 0: upper half, bit
//! 1: negative).
//!
//! Ties in magnitude go to the lower index, so the bytes depend on the
//! values only.

fn kept(len: usize, k: usize) -> usize {
    k.min(len)
}

fn chunk_bytes(len: usize, k: usize) -> usize {
    let k = kept(len, k);
    8 + 2 * k + k.div_ceil(4)
}

/// Bytes `n` elements take in chunks of `chunk`.
pub fn wire_bytes(n: usize, chunk: usize, k: usize) -> usize {
    super::chunked_bytes(n, chunk, |len| chunk_bytes(len, k))
}

pub fn encode(x: &[f32], chunk: usize, k: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(wire_bytes(x.len(), chunk, k));
    let mut order: Vec<usize> = Vec::with_capacity(chunk);
    let mut in_upper = vec![false; chunk.min(x.len())];
    for c in x.chunks(chunk) {
        let k = kept(c.len(), k);
        // Largest magnitude first; NaN counts as largest, so it travels.
        order.clear();
        order.extend(0..c.len());
        let mag = |i: usize| if c[i].is_nan() { f32::INFINITY } else { c[i].abs() };
        order.sort_by(|&a, &b| mag(b).total_cmp(&mag(a)).then(a.cmp(&b)));
        let (upper, lower) = order[..k].split_at(k.div_ceil(2));
        let mean = |ix: &[usize]| ix.iter().map(|&i| c[i].abs()).sum::<f32>() / ix.len().max(1) as f32;
        let hi = mean(upper);
        let lo = if lower.is_empty() { hi } else { mean(lower) };
        out.extend_from_slice(&lo.to_le_bytes());
        out.extend_from_slice(&hi.to_le_bytes());
        let mut sent: Vec<usize> = order[..k].to_vec();
        sent.sort_unstable();
        out.extend(sent.iter().flat_map(|&i| (i as u16).to_le_bytes()));
        in_upper.fill(false);
        upper.iter().for_each(|&i| in_upper[i] = true);
        let code = |i: usize| u8::from(in_upper[i]) | (u8::from(c[i] < 0.0) << 1);
        out.extend(sent.chunks(4).map(|q| q.iter().enumerate().fold(0u8, |b, (j, &i)| b | (code(i) << (2 * j)))));
    }
    out
}

pub fn decode(bytes: &[u8], chunk: usize, k: usize, out: &mut [f32]) {
    let mut at = 0;
    for c in out.chunks_mut(chunk) {
        let k = kept(c.len(), k);
        let f = |o: usize| f32::from_le_bytes(bytes[at + o..at + o + 4].try_into().expect("4 bytes"));
        let (lo, hi) = (f(0), f(4));
        let index = |j: usize| usize::from(u16::from_le_bytes([bytes[at + 8 + 2 * j], bytes[at + 9 + 2 * j]]));
        let codes = &bytes[at + 8 + 2 * k..];
        c.fill(0.0);
        for j in 0..k {
            let code = (codes[j / 4] >> (2 * (j % 4))) & 3;
            let m = if code & 1 != 0 { hi } else { lo };
            c[index(j)] = if code & 2 != 0 { -m } else { m };
        }
        at += chunk_bytes(c.len(), k);
    }
}
