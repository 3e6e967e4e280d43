//! Pseudo-gradient codecs: what an outer gradient (theta_old - theta_new)
//! looks like on the wire when it travels compressed, and the
//! error-feedback buffer that keeps compressed outer steps converging.
//!
//! | `outer_wire` | per element | how | after |
//! |---|---|---|---|
//! | `f32` | 4 bytes | as is | - |
//! | `bf16` | 2 bytes | round to nearest even | INTELLECT-1 and DiLoCo's bf16 all-reduce |
//! | `int8` | 1 byte + 4 per chunk | symmetric, scale = chunk absmax / 127 | INTELLECT-1's int8 pseudo-gradients |
//! | `fp4` | 1/2 byte + 4 per chunk | sign + 3-bit exponent (E3M0), scale = chunk absmax | Streaming DiLoCo's 4-bit outer gradients |
//! | `topk:K+2bit` | per chunk: K x (2-byte index + 2 bits) + 8 | the K largest magnitudes of each chunk, each as sign + one of two magnitudes | SparseLoCo's top-k + 2-bit values |
//!
//! Chunks are [`CHUNK`] consecutive elements of the flat parameter vector.
//! The scales of `int8` and `fp4` and the two magnitudes of `topk` are our
//! choices where the papers say only the bit width: written down in each
//! file. Decoding gives f32: the outer step always runs in f32.
//!
//! With error feedback (feedback.rs) a worker adds what its last message
//! left out to the next pseudo-gradient before encoding it, so nothing is
//! lost for good, only delayed (Seide et al. 2014; Karimireddy et al. 2019).

mod feedback;
mod scaled;
mod topk;

use crate::comm::bf16::{from_bf16_bits, to_bf16_bits};
use anyhow::{bail, Result};
pub use feedback::{sender_copies, ErrorFeedback};

/// Elements per chunk of the scaled and top-k codecs: one scale (or two
/// magnitudes) per chunk, and top-k indices fit in 16 bits.
pub const CHUNK: usize = 4096;

/// How a pseudo-gradient travels. In TOML a string: `"int8"`, `"topk:64+2bit"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum OuterWire {
    /// 4 bytes per element, exact.
    #[default]
    F32,
    /// bfloat16, round to nearest even.
    Bf16,
    /// 8-bit integers with a scale per chunk.
    Int8,
    /// 4-bit E3M0 floats (sign, 3 exponent bits) with a scale per chunk.
    Fp4,
    /// The `k` largest magnitudes of each chunk, 2 bits each.
    TopK2Bit { k: usize },
}

impl std::str::FromStr for OuterWire {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<OuterWire> {
        Ok(match s {
            "f32" => OuterWire::F32,
            "bf16" => OuterWire::Bf16,
            "int8" => OuterWire::Int8,
            "fp4" => OuterWire::Fp4,
            _ => {
                let k = s.strip_prefix("topk:").and_then(|r| r.strip_suffix("+2bit")).and_then(|k| k.parse().ok());
                match k {
                    Some(k) if (1..=CHUNK).contains(&k) => OuterWire::TopK2Bit { k },
                    _ => bail!(
                        "outer_wire = \"{s}\": use f32, bf16, int8, fp4 or topk:K+2bit with K in 1..={CHUNK} (the values kept per chunk of {CHUNK}), e.g. topk:64+2bit"
                    ),
                }
            }
        })
    }
}

impl TryFrom<String> for OuterWire {
    type Error = anyhow::Error;
    fn try_from(s: String) -> Result<OuterWire> {
        s.parse()
    }
}

impl From<OuterWire> for String {
    fn from(w: OuterWire) -> String {
        w.to_string()
    }
}

impl std::fmt::Display for OuterWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OuterWire::F32 => write!(f, "f32"),
            OuterWire::Bf16 => write!(f, "bf16"),
            OuterWire::Int8 => write!(f, "int8"),
            OuterWire::Fp4 => write!(f, "fp4"),
            OuterWire::TopK2Bit { k } => write!(f, "topk:{k}+2bit"),
        }
    }
}

impl OuterWire {
    /// `x` encoded: the bytes that travel.
    pub fn encode(self, x: &[f32]) -> Vec<u8> {
        match self {
            OuterWire::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
            OuterWire::Bf16 => x.iter().flat_map(|&v| to_bf16_bits(v).to_le_bytes()).collect(),
            OuterWire::Int8 => scaled::encode(x, CHUNK, &scaled::INT8),
            OuterWire::Fp4 => scaled::encode(x, CHUNK, &scaled::FP4),
            OuterWire::TopK2Bit { k } => topk::encode(x, CHUNK, k),
        }
    }

    /// Decodes `bytes` (from [`OuterWire::encode`] of as many elements as
    /// `out` has) into `out`.
    pub fn decode(self, bytes: &[u8], out: &mut [f32]) {
        assert_eq!(bytes.len(), self.wire_bytes(out.len()), "{self}: {} bytes for {} elements", bytes.len(), out.len());
        match self {
            OuterWire::F32 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes(b.try_into().expect("4 bytes"));
                }
            }
            OuterWire::Bf16 => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = from_bf16_bits(u16::from_le_bytes([b[0], b[1]]));
                }
            }
            OuterWire::Int8 => scaled::decode(bytes, CHUNK, &scaled::INT8, out),
            OuterWire::Fp4 => scaled::decode(bytes, CHUNK, &scaled::FP4, out),
            OuterWire::TopK2Bit { k } => topk::decode(bytes, CHUNK, k, out),
        }
    }

    /// Bytes that `n` elements take on the wire.
    pub fn wire_bytes(self, n: usize) -> usize {
        match self {
            OuterWire::F32 => 4 * n,
            OuterWire::Bf16 => 2 * n,
            OuterWire::Int8 => scaled::wire_bytes(n, CHUNK, &scaled::INT8),
            OuterWire::Fp4 => scaled::wire_bytes(n, CHUNK, &scaled::FP4),
            OuterWire::TopK2Bit { k } => topk::wire_bytes(n, CHUNK, k),
        }
    }

    /// `x` as the receiver sees it: encoded, then decoded.
    pub fn round_trip(self, x: &[f32], out: &mut [f32]) {
        self.decode(&self.encode(x), out);
    }
}

/// Bytes of `n` elements cut into chunks of `chunk` (the last may be
/// shorter), a chunk of `len` elements taking `bytes_of(len)`.
fn chunked_bytes(n: usize, chunk: usize, bytes_of: impl Fn(usize) -> usize) -> usize {
    let last = n % chunk;
    (n / chunk) * bytes_of(chunk) + if last > 0 { bytes_of(last) } else { 0 }
}

#[cfg(test)]
mod tests;
