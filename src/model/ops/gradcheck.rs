//! Finite-difference gradient checking for the hand-written kernels (tests only).

/// A deterministic, irregular test vector (no RNG needed).
pub fn probe(n: usize, salt: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + 1.0) * 0.618_034 * salt + salt).sin() * 0.9).collect()
}

/// Check an op's backward against central finite differences.
///
/// `forward(inputs) -> (output, saved)` and
/// `backward(inputs, dout, saved) -> d(inputs)`. The scalar checked is
/// `L = sum(output * r)` for a fixed irregular `r`, so every output element
/// contributes. f32 finite differences are noisy, hence eps = 1e-2 on
/// O(1) inputs and a tolerance relative to the gradient's scale.
pub fn check_op<S>(
    inputs: &[Vec<f32>],
    forward: impl Fn(&[Vec<f32>]) -> (Vec<f32>, S),
    backward: impl Fn(&[Vec<f32>], &[f32], &S) -> Vec<Vec<f32>>,
) {
    let (y, saved) = forward(inputs);
    let r = probe(y.len(), 0.7);
    let loss =
        |ins: &[Vec<f32>]| -> f64 { forward(ins).0.iter().zip(&r).map(|(a, b)| (*a as f64) * (*b as f64)).sum() };
    let grads = backward(inputs, &r, &saved);
    assert_eq!(grads.len(), inputs.len());
    let eps = 1e-2f32;
    for (k, (inp, g)) in inputs.iter().zip(&grads).enumerate() {
        assert_eq!(inp.len(), g.len(), "gradient {k} has the wrong length");
        let scale = g.iter().fold(1e-3f32, |m, v| m.max(v.abs()));
        for i in 0..inp.len() {
            let mut ins = inputs.to_vec();
            ins[k][i] = inp[i] + eps;
            let up = loss(&ins);
            ins[k][i] = inp[i] - eps;
            let down = loss(&ins);
            let fd = ((up - down) / (2.0 * eps as f64)) as f32;
            assert!(
                (fd - g[i]).abs() <= 2e-2 * scale,
                "input {k}[{i}]: analytic {} vs finite-difference {fd} (scale {scale})",
                g[i]
            );
        }
    }
}
