//! What travels besides dense `f32`/`bf16` buffers: point-to-point
//! [`Message`]s and packed [`Sparse`] payloads.
//!
//! Both have an exact byte encoding, the one the MPI backend sends and the
//! one byte counters count. The in-process backend hands a `Message` over
//! without encoding it (a move), after rounding its values to the wire
//! dtype, so the receiver sees the same values either way.
//!
//! ```text
//! Message:  tag u32 | wire u8 | 3 pad | n_scalars u32 | n_values u32 | scalars f64 x n | values (f32 or bf16) x n
//!           (wire code 2: the values are `packed` bytes, n_values of them: a codec's message, comm/codec)
//! Sparse:   indices (u8, u16 or u32 each) x k | values (f32 or bf16) x k      (k and the widths are agreed in advance)
//! ```
//! All little-endian.

use super::bf16::{from_bf16_bits, to_bf16_bits};
use super::WireDtype;
use anyhow::{bail, ensure, Result};

/// Bytes of a message's fixed header.
pub const MESSAGE_HEADER: usize = 16;

/// A point-to-point message: a tag, exact scalars, and values that travel
/// in `wire` (a model, a pseudo-gradient).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Message {
    /// What the message is, in the sender's and receiver's own terms.
    pub tag: u32,
    /// Exact numbers (counts, step numbers, norms): 8 bytes each.
    pub scalars: Vec<f64>,
    /// The payload, rounded to `wire` in transit.
    pub values: Vec<f32>,
    /// How `values` travel.
    pub wire: WireDtype,
    /// Bytes packed by a codec (comm/codec: a compressed pseudo-gradient),
    /// sent as they are; a message carries these or `values`, not both.
    pub packed: Vec<u8>,
}

impl Message {
    /// A message with only a tag.
    pub fn new(tag: u32) -> Message {
        Message { tag, ..Message::default() }
    }

    /// Adds exact scalars.
    pub fn with_scalars(mut self, scalars: Vec<f64>) -> Message {
        self.scalars = scalars;
        self
    }

    /// Adds values that travel as `wire`.
    pub fn with_values(mut self, values: Vec<f32>, wire: WireDtype) -> Message {
        self.values = values;
        self.wire = wire;
        self
    }

    /// Adds bytes a codec packed; they travel as they are (no `values`).
    pub fn with_packed(mut self, packed: Vec<u8>) -> Message {
        self.packed = packed;
        self
    }

    /// Bytes this message occupies on the wire.
    pub fn wire_len(&self) -> usize {
        MESSAGE_HEADER + 8 * self.scalars.len() + self.values.len() * self.wire.bytes_per_elem() + self.packed.len()
    }

    /// Rounds the values to what the wire carries (a no-op for f32).
    pub fn round_for_wire(&mut self) {
        if self.wire == WireDtype::Bf16 {
            super::bf16::round_slice_bf16(&mut self.values);
        }
    }

    /// Appends the encoding (module docs) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        assert!(self.packed.is_empty() || self.values.is_empty(), "a message carries values or packed bytes, not both");
        out.reserve(self.wire_len());
        out.extend_from_slice(&self.tag.to_le_bytes());
        out.push(match self.wire {
            _ if !self.packed.is_empty() => 2,
            WireDtype::F32 => 0,
            WireDtype::Bf16 => 1,
        });
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&(self.scalars.len() as u32).to_le_bytes());
        out.extend_from_slice(&((self.values.len() + self.packed.len()) as u32).to_le_bytes());
        for s in &self.scalars {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&self.packed);
        match self.wire {
            WireDtype::F32 => self.values.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
            WireDtype::Bf16 => self.values.iter().for_each(|v| out.extend_from_slice(&to_bf16_bits(*v).to_le_bytes())),
        }
    }

    /// Decodes what [`Message::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Message> {
        ensure!(bytes.len() >= MESSAGE_HEADER, "message of {} bytes is shorter than its header", bytes.len());
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
        let (wire, packed) = match bytes[4] {
            0 => (WireDtype::F32, false),
            1 => (WireDtype::Bf16, false),
            2 => (WireDtype::F32, true),
            other => bail!("message has unknown wire dtype code {other}"),
        };
        let (ns, nv) = (u32_at(8) as usize, u32_at(12) as usize);
        let want = MESSAGE_HEADER + 8 * ns + nv * if packed { 1 } else { wire.bytes_per_elem() };
        ensure!(bytes.len() == want, "message is {} bytes but its header says {want}", bytes.len());
        let mut at = MESSAGE_HEADER;
        let scalars = (0..ns)
            .map(|i| f64::from_le_bytes(bytes[at + 8 * i..at + 8 * i + 8].try_into().expect("8 bytes")))
            .collect();
        at += 8 * ns;
        if packed {
            return Ok(Message { tag: u32_at(0), scalars, values: Vec::new(), wire, packed: bytes[at..].to_vec() });
        }
        let values = match wire {
            WireDtype::F32 => {
                bytes[at..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect()
            }
            WireDtype::Bf16 => {
                bytes[at..].chunks_exact(2).map(|c| from_bf16_bits(u16::from_le_bytes([c[0], c[1]]))).collect()
            }
        };
        Ok(Message { tag: u32_at(0), scalars, values, wire, packed: Vec::new() })
    }
}

/// The narrowest unsigned integer that holds every index of a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexWidth {
    /// Domains of up to 256 indices.
    U8,
    /// Up to 65 536.
    U16,
    /// Up to 2^32.
    U32,
}

impl IndexWidth {
    /// The narrowest width for indices `0..domain`.
    pub fn for_domain(domain: usize) -> IndexWidth {
        if domain <= 1 << 8 {
            IndexWidth::U8
        } else if domain <= 1 << 16 {
            IndexWidth::U16
        } else {
            assert!(domain as u64 <= 1 << 32, "sparse domain of {domain} indices does not fit 32 bits");
            IndexWidth::U32
        }
    }

    /// Bytes per index.
    pub fn bytes(self) -> usize {
        match self {
            IndexWidth::U8 => 1,
            IndexWidth::U16 => 2,
            IndexWidth::U32 => 4,
        }
    }
}

/// The shape of a packed sparse payload, agreed by every rank in advance
/// (so all-gathers move fixed-size chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseLayout {
    /// Number of (index, value) pairs.
    pub pairs: usize,
    /// How indices travel.
    pub index: IndexWidth,
    /// How values travel.
    pub value: WireDtype,
}

impl SparseLayout {
    /// `pairs` pairs whose indices lie in `0..domain`.
    pub fn new(pairs: usize, domain: usize, value: WireDtype) -> SparseLayout {
        SparseLayout { pairs, index: IndexWidth::for_domain(domain), value }
    }

    /// Encoded size in bytes.
    pub fn bytes(&self) -> usize {
        self.pairs * (self.index.bytes() + self.value.bytes_per_elem())
    }
}

/// (index, value) pairs, e.g. the top-k coefficients of DeMo's chunks.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sparse {
    /// Indices into the payload's domain.
    pub indices: Vec<u32>,
    /// One value per index.
    pub values: Vec<f32>,
}

impl Sparse {
    /// Writes the encoding into `out` (`layout.bytes()` long). Panics if an
    /// index does not fit the layout's width or the lengths disagree.
    pub fn encode(&self, layout: &SparseLayout, out: &mut [u8]) {
        assert_eq!(
            self.indices.len(),
            layout.pairs,
            "sparse payload has {} indices, layout says {}",
            self.indices.len(),
            layout.pairs
        );
        assert_eq!(
            self.values.len(),
            layout.pairs,
            "sparse payload has {} values, layout says {}",
            self.values.len(),
            layout.pairs
        );
        assert_eq!(
            out.len(),
            layout.bytes(),
            "sparse encode: output of {} bytes, layout needs {}",
            out.len(),
            layout.bytes()
        );
        let ib = layout.index.bytes();
        let (idx, vals) = out.split_at_mut(layout.pairs * ib);
        for (dst, &i) in idx.chunks_exact_mut(ib).zip(&self.indices) {
            let le = i.to_le_bytes();
            assert!(le[ib..].iter().all(|&b| b == 0), "index {i} does not fit {:?}", layout.index);
            dst.copy_from_slice(&le[..ib]);
        }
        match layout.value {
            WireDtype::F32 => {
                vals.chunks_exact_mut(4).zip(&self.values).for_each(|(d, v)| d.copy_from_slice(&v.to_le_bytes()))
            }
            WireDtype::Bf16 => vals
                .chunks_exact_mut(2)
                .zip(&self.values)
                .for_each(|(d, v)| d.copy_from_slice(&to_bf16_bits(*v).to_le_bytes())),
        }
    }

    /// Reads what [`Sparse::encode`] wrote.
    pub fn decode(layout: &SparseLayout, bytes: &[u8]) -> Sparse {
        assert_eq!(
            bytes.len(),
            layout.bytes(),
            "sparse decode: {} bytes, layout needs {}",
            bytes.len(),
            layout.bytes()
        );
        let ib = layout.index.bytes();
        let (idx, vals) = bytes.split_at(layout.pairs * ib);
        let indices = idx
            .chunks_exact(ib)
            .map(|c| {
                let mut le = [0u8; 4];
                le[..ib].copy_from_slice(c);
                u32::from_le_bytes(le)
            })
            .collect();
        let values = match layout.value {
            WireDtype::F32 => vals.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4"))).collect(),
            WireDtype::Bf16 => vals.chunks_exact(2).map(|c| from_bf16_bits(u16::from_le_bytes([c[0], c[1]]))).collect(),
        };
        Sparse { indices, values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_round_trips_and_counts_its_bytes() {
        let m = Message::new(7)
            .with_scalars(vec![3.0, 1e300, -0.5])
            .with_values(vec![1.0, -2.5, 1.0 / 3.0], WireDtype::F32);
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(b.len(), 16 + 24 + 12);
        assert_eq!(b.len(), m.wire_len());
        assert_eq!(Message::decode(&b).unwrap(), m);
    }

    #[test]
    fn packed_bytes_travel_as_they_are_and_count_one_byte_each() {
        // An int8 pseudo-gradient of 3 values: a 4-byte scale and 3 codes.
        let m = Message::new(2).with_scalars(vec![5.0]).with_packed(vec![0, 0, 128, 63, 127, 192, 1]);
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!((b.len(), b[4]), (16 + 8 + 7, 2), "wire code 2, n_values = the bytes");
        assert_eq!(b.len(), m.wire_len());
        assert_eq!(Message::decode(&b).unwrap(), m);
    }

    #[test]
    fn bf16_message_rounds_only_values_and_keeps_scalars_exact() {
        // 1/3 is not a bf16 value; 16777217 is not even an f32 value, but
        // scalars are f64: both scalars come back exactly.
        let m =
            Message::new(1).with_scalars(vec![16_777_217.0, 0.1]).with_values(vec![1.0 / 3.0, 257.0], WireDtype::Bf16);
        let mut b = Vec::new();
        m.encode(&mut b);
        assert_eq!(b.len(), 16 + 16 + 4);
        let back = Message::decode(&b).unwrap();
        assert_eq!(back.scalars, vec![16_777_217.0, 0.1]);
        // bf16 keeps 8 significant bits: 1/3 -> 0.333984375, 257 -> 256 (tie to even).
        assert_eq!(back.values, vec![0.333_984_38, 256.0]);
        let mut rounded = m.clone();
        rounded.round_for_wire();
        assert_eq!(rounded.values, back.values, "in-process rounding == what the encoding carries");
    }

    #[test]
    fn truncated_message_is_an_error() {
        let mut b = Vec::new();
        Message::new(2).with_values(vec![1.0; 4], WireDtype::F32).encode(&mut b);
        assert!(Message::decode(&b[..b.len() - 1]).unwrap_err().to_string().contains("header says"));
        assert!(Message::decode(&b[..3]).is_err());
    }

    #[test]
    fn index_width_is_the_narrowest_that_fits() {
        assert_eq!(IndexWidth::for_domain(64), IndexWidth::U8);
        assert_eq!(IndexWidth::for_domain(256), IndexWidth::U8);
        assert_eq!(IndexWidth::for_domain(257), IndexWidth::U16);
        assert_eq!(IndexWidth::for_domain(65_536), IndexWidth::U16);
        assert_eq!(IndexWidth::for_domain(65_537), IndexWidth::U32);
    }

    #[test]
    fn sparse_payload_round_trips_exactly_and_bf16_rounds_only_values() {
        // 3 pairs over a 300-index domain: u16 indices; f32 values: 3*(2+4) bytes.
        let s = Sparse { indices: vec![0, 299, 256], values: vec![0.1, -7.0, 1.0 / 3.0] };
        let l = SparseLayout::new(3, 300, WireDtype::F32);
        assert_eq!(l.bytes(), 18);
        let mut b = vec![0u8; l.bytes()];
        s.encode(&l, &mut b);
        assert_eq!(Sparse::decode(&l, &b), s);
        let l16 = SparseLayout::new(3, 300, WireDtype::Bf16);
        assert_eq!(l16.bytes(), 12);
        let mut b = vec![0u8; l16.bytes()];
        s.encode(&l16, &mut b);
        let back = Sparse::decode(&l16, &b);
        assert_eq!(back.indices, s.indices, "indices are exact");
        assert_eq!(back.values, s.values.iter().map(|&v| crate::comm::bf16::round_bf16(v)).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "does not fit U8")]
    fn sparse_index_outside_the_layout_panics() {
        let l = SparseLayout::new(1, 100, WireDtype::F32);
        Sparse { indices: vec![300], values: vec![1.0] }.encode(&l, &mut [0u8; 5]);
    }
}
