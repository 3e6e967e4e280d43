//! Codecs on numbers small enough to check by hand, then their stated
//! error bounds and sizes on random data.

use super::*;
use rand::{Rng, SeedableRng};

#[test]
fn outer_wire_parses_what_it_prints_and_names_the_fix_otherwise() {
    for s in ["f32", "bf16", "int8", "fp4", "topk:64+2bit"] {
        assert_eq!(s.parse::<OuterWire>().unwrap().to_string(), s);
    }
    for bad in ["fp8", "topk:0+2bit", "topk:64", "topk:5000+2bit"] {
        let e = bad.parse::<OuterWire>().unwrap_err().to_string();
        assert!(e.contains("use f32, bf16, int8, fp4 or topk:K+2bit"), "{e}");
    }
}

#[test]
fn int8_scales_each_chunk_by_its_largest_magnitude() {
    // s = 1: codes round(127 y) = 127, -64 (-63.5 rounds away from zero), 32, 0.
    let x = [1.0, -0.5, 0.25, 0.0];
    let bytes = scaled::encode(&x, 4, &scaled::INT8);
    assert_eq!(bytes, [1f32.to_le_bytes().as_slice(), &[127, (-64i8) as u8, 32, 0]].concat());
    let mut out = [0.0; 4];
    scaled::decode(&bytes, 4, &scaled::INT8, &mut out);
    assert_eq!(out, [1.0, -64.0 / 127.0, 32.0 / 127.0, 0.0]);
}

#[test]
fn fp4_rounds_to_the_nearest_power_of_two_of_the_chunk_scale() {
    // s = 8: magnitudes 8 * 2^-6 .. 8 = 0.125 .. 8; below s/128 = 0.0625 is zero.
    let x = [8.0, 4.0, 3.2, -1.0, 0.1, 0.05, 0.0, -8.0];
    let bytes = scaled::encode(&x, 8, &scaled::FP4);
    assert_eq!(bytes.len(), 4 + 4, "a scale and 8 codes of 4 bits");
    // Codes (sign << 3 | e): 7, 6, 6 (3.2 is nearer 4 than 2), 8|4, 1, 0, 0, 8|7.
    assert_eq!(bytes[4..], [7 | 6 << 4, 6 | 12 << 4, 1, 15 << 4]);
    let mut out = [0.0; 8];
    scaled::decode(&bytes, 8, &scaled::FP4, &mut out);
    assert_eq!(out, [8.0, 4.0, 4.0, -1.0, 0.125, 0.0, 0.0, -8.0]);
}

#[test]
fn topk_keeps_the_largest_magnitudes_as_two_means() {
    // Kept: -3, 2 (upper half, mean 2.5) and -1 (lower half, mean 1).
    let x = [0.1, -3.0, 2.0, 0.5, -1.0, 0.0];
    let bytes = topk::encode(&x, 6, 3);
    assert_eq!(bytes.len(), 8 + 3 * 2 + 1, "lo, hi, 3 indices, 3 codes in one byte");
    assert_eq!(bytes[8..14], [1, 0, 2, 0, 4, 0], "indices ascending");
    // Codes: index 1 upper and negative (3), index 2 upper (1), index 4 lower and negative (2).
    assert_eq!(bytes[14], 3 | 1 << 2 | 2 << 4);
    let mut out = [9.0; 6];
    topk::decode(&bytes, 6, 3, &mut out);
    assert_eq!(out, [0.0, -2.5, 2.5, 0.0, -1.0, 0.0]);
    // A tie in magnitude goes to the lower index.
    let mut one = [0.0; 3];
    topk::decode(&topk::encode(&[1.0, -1.0, 1.0], 3, 1), 3, 1, &mut one);
    assert_eq!(one, [1.0, 0.0, 0.0]);
}

#[test]
fn error_feedback_holds_exactly_what_was_not_sent() {
    let wire = OuterWire::TopK2Bit { k: 1 };
    let mut ef = ErrorFeedback::new(wire, Some(1.0), 3);
    // Round 1: m = [1, 2, 3]; 3 travels; e = [1, 2, 0].
    ef.encode(&[1.0, 2.0, 3.0]);
    assert_eq!((ef.sent(), ef.residual()), (&[0.0, 0.0, 3.0][..], &[1.0, 2.0, 0.0][..]));
    // Round 2: m = [1, 0, 0] + e = [2, 2, 0]; the tie goes to index 0; e = [0, 2, 0].
    ef.encode(&[1.0, 0.0, 0.0]);
    assert_eq!((ef.sent(), ef.residual()), (&[2.0, 0.0, 0.0][..], &[0.0, 2.0, 0.0][..]));
    // Sent so far [2, 0, 3] = deltas [2, 2, 3] - residual [0, 2, 0].
    let mut plain = ErrorFeedback::new(wire, None, 3);
    plain.encode(&[1.0, 2.0, 3.0]);
    plain.encode(&[1.0, 0.0, 0.0]);
    assert_eq!((plain.sent(), plain.residual()), (&[1.0, 0.0, 0.0][..], &[][..]));
}

#[test]
fn error_feedback_decays_the_residual_by_beta() {
    // SparseLoCo's e <- beta e + Delta, beta = 0.5, top-1 of 3.
    let mut ef = ErrorFeedback::new(OuterWire::TopK2Bit { k: 1 }, Some(0.5), 3);
    // Round 1: m = [1, 2, 3] (no residual yet); 3 travels; e = [1, 2, 0].
    ef.encode(&[1.0, 2.0, 3.0]);
    assert_eq!((ef.sent(), ef.residual()), (&[0.0, 0.0, 3.0][..], &[1.0, 2.0, 0.0][..]));
    // Round 2: m = [1, 0, 0] + 0.5 [1, 2, 0] = [1.5, 1, 0]; 1.5 travels; e = [0, 1, 0].
    ef.encode(&[1.0, 0.0, 0.0]);
    assert_eq!((ef.sent(), ef.residual()), (&[1.5, 0.0, 0.0][..], &[0.0, 1.0, 0.0][..]));
}

#[test]
fn every_codec_keeps_its_stated_error_and_size_over_several_chunks() {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(3);
    let n = 2 * CHUNK + 5;
    let x: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0) * 10f32.powi(rng.random_range(-3..2))).collect();
    let scale =
        |i: usize| x[i / CHUNK * CHUNK..((i / CHUNK + 1) * CHUNK).min(n)].iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut out = vec![0.0; n];
    for wire in ["f32", "bf16", "int8", "fp4", "topk:64+2bit"] {
        let wire: OuterWire = wire.parse().unwrap();
        let bytes = wire.encode(&x);
        assert_eq!(bytes.len(), wire.wire_bytes(n), "{wire}");
        wire.decode(&bytes, &mut out);
        for i in 0..n {
            let (v, d, s) = (x[i], out[i], scale(i));
            let ok = match wire {
                OuterWire::F32 => d == v,
                OuterWire::Bf16 => (d - v).abs() <= v.abs() / 256.0,
                OuterWire::Int8 => (d - v).abs() <= s / 254.0 * (1.0 + 1e-5),
                // Within a third of |x| from s/64 up; below, at most s/64 off.
                OuterWire::Fp4 => (d - v).abs() <= (v.abs() / 3.0).max(s / 64.0) * (1.0 + 1e-5),
                OuterWire::TopK2Bit { .. } => d == 0.0 || d.signum() == v.signum(),
            };
            assert!(ok, "{wire}: element {i}: {v} decoded as {d} (chunk scale {s})");
        }
    }
    let kept = out.iter().filter(|&&d| d != 0.0).count();
    assert_eq!(kept, 64 + 64 + 5, "topk: 64 per chunk; the last chunk has only 5");
}

#[test]
fn a_non_finite_pseudo_gradient_stays_non_finite() {
    let x = [1.0, f32::NAN, 0.5];
    for wire in ["int8", "fp4", "topk:1+2bit"] {
        let wire: OuterWire = wire.parse().unwrap();
        let mut out = [0.0; 3];
        wire.round_trip(&x, &mut out);
        assert!(out.iter().any(|v| !v.is_finite()), "{wire}: {out:?}");
    }
}
