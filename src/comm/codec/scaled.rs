//! Codecs with one scale per chunk: `int8` and `fp4`.
//!
//! Each chunk travels as its scale s = max |x| (f32, 4 bytes) and one code
//! per element for y = x / s in [-1, 1]:
//!
//! - int8: q = round(127 y), a signed byte; x' = s q / 127. The error is at
//!   most s / 254 per element (symmetric, no zero point: pseudo-gradients
//!   are centred on zero).
//! - fp4 (E3M0): sign bit + 3-bit exponent e; e = 0 is zero, e = 1..7 is
//!   2^(e-7), so |x'| is one of s/64, s/32, ..., s/2, s. |y| rounds to the
//!   nearest of those in linear distance (below 1/128 to zero). Streaming
//!   DiLoCo (arXiv 2501.18512, Sec. 2.3) sends outer gradients as E3M0 and
//!   names no scale; scaling by the chunk's largest magnitude is our choice.
//!   Two codes per byte, the first in the low nibble.
//!
//! A chunk of zeros has s = 0 and decodes to zeros; a non-finite element
//! makes s non-finite and the chunk decodes non-finite (a diverged run's
//! pseudo-gradient stays visibly diverged).

/// A per-chunk-scaled number format.
pub struct Format {
    /// Bits per element.
    pub bits: usize,
    /// The code of y = x / s, |y| <= 1.
    pub code: fn(f32) -> u8,
    /// The value of a code, in units of s.
    pub value: fn(u8) -> f32,
}

pub const INT8: Format = Format { bits: 8, code: int8_code, value: int8_value };
pub const FP4: Format = Format { bits: 4, code: fp4_code, value: fp4_value };

fn int8_code(y: f32) -> u8 {
    (127.0 * y).round().clamp(-127.0, 127.0) as i8 as u8
}

fn int8_value(c: u8) -> f32 {
    f32::from(c as i8) / 127.0
}

fn fp4_code(y: f32) -> u8 {
    let sign = if y < 0.0 { 8 } else { 0 };
    let a = y.abs();
    if a < 1.0 / 128.0 {
        return 0;
    }
    // The largest e with 2^(e-7) <= a, then up one if a is nearer the next power.
    let mut e = (a.log2().floor() as i32 + 7).clamp(1, 7);
    if e < 7 && a > 1.5 * 2f32.powi(e - 7) {
        e += 1;
    }
    sign | e as u8
}

fn fp4_value(c: u8) -> f32 {
    let e = i32::from(c & 7);
    let m = if e == 0 { 0.0 } else { 2f32.powi(e - 7) };
    if c & 8 != 0 {
        -m
    } else {
        m
    }
}

/// Bytes of one chunk of `len` elements: its scale and its packed codes.
fn chunk_bytes(len: usize, f: &Format) -> usize {
    4 + (len * f.bits).div_ceil(8)
}

/// Bytes `n` elements take in chunks of `chunk`.
pub fn wire_bytes(n: usize, chunk: usize, f: &Format) -> usize {
    super::chunked_bytes(n, chunk, |len| chunk_bytes(len, f))
}

pub fn encode(x: &[f32], chunk: usize, f: &Format) -> Vec<u8> {
    let mut out = Vec::with_capacity(wire_bytes(x.len(), chunk, f));
    for c in x.chunks(chunk) {
        // f32::max skips NaN: a non-finite element is checked for apart.
        let s = match c.iter().all(|v| v.is_finite()) {
            true => c.iter().fold(0f32, |m, v| m.max(v.abs())),
            false => f32::NAN,
        };
        out.extend_from_slice(&s.to_le_bytes());
        let code = |v: f32| if s > 0.0 { (f.code)(v / s) } else { 0 };
        match f.bits {
            8 => out.extend(c.iter().map(|&v| code(v))),
            4 => out.extend(c.chunks(2).map(|p| code(p[0]) | p.get(1).map_or(0, |&v| code(v) << 4))),
            b => unreachable!("{b}-bit codes are not packed"),
        }
    }
    out
}

pub fn decode(bytes: &[u8], chunk: usize, f: &Format, out: &mut [f32]) {
    let mut at = 0;
    for c in out.chunks_mut(chunk) {
        let s = f32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let codes = &bytes[at + 4..at + chunk_bytes(c.len(), f)];
        for (i, o) in c.iter_mut().enumerate() {
            let code = match f.bits {
                8 => codes[i],
                _ => (codes[i / 2] >> (4 * (i % 2))) & 15,
            };
            *o = s * (f.value)(code);
        }
        at += chunk_bytes(c.len(), f);
    }
}
