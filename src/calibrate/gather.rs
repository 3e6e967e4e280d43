//! Calibrate's samples as bytes, for the MPI gather to rank 0
//! (calibrate/mpi.rs): every rank times its own work, rank 0 pools them.
//! Plain little-endian f64 words: the ranks run one binary.

use super::compute::{ComputeCosts, Samples};

/// Samples as bytes: for each kind, its count then its values (f64, little
/// endian); then the number of micro-batch sets, and each set as its
/// number of series and each series as a kind (the pooled micro-batches
/// are rebuilt from them).
pub fn encode(c: &ComputeCosts) -> Vec<u8> {
    let mut out = Vec::new();
    let put = |out: &mut Vec<u8>, s: &Samples| {
        out.extend_from_slice(&(s.0.len() as u64).to_le_bytes());
        s.0.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
    };
    [&c.adamw, &c.adamw_back_to_back, &c.outer, &c.demo].into_iter().for_each(|s| put(&mut out, s));
    out.extend_from_slice(&(c.micro_batch_sets.len() as u64).to_le_bytes());
    for set in &c.micro_batch_sets {
        out.extend_from_slice(&(set.len() as u64).to_le_bytes());
        set.iter().for_each(|s| put(&mut out, s));
    }
    out
}

/// One kind of [`encode`]: its count, then that many values.
fn next_samples(words: &mut impl Iterator<Item = u64>) -> Samples {
    let n = words.next().unwrap_or(0) as usize;
    Samples(words.take(n).map(f64::from_bits).collect())
}

/// Adds the samples of `bytes` ([`encode`]) to `c`'s, each micro-batch
/// set to the set of the same index (every rank times its n-th set at once).
pub fn append(c: &mut ComputeCosts, bytes: &[u8]) {
    let mut words = bytes.chunks_exact(8).map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")));
    for s in [&mut c.adamw, &mut c.adamw_back_to_back, &mut c.outer, &mut c.demo] {
        s.0.extend(next_samples(&mut words).0);
    }
    let sets = words.next().unwrap_or(0) as usize;
    for set in 0..sets {
        let n = words.next().unwrap_or(0) as usize;
        let series = (0..n).map(|_| next_samples(&mut words)).collect();
        c.add_to_set(set, series);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_micro_batch_series_survive_the_gather_bytes() {
        // A rank with two sets: 3 micro-batches, then (minutes later) 1.
        let mut mine = ComputeCosts { adamw: Samples(vec![1.0, 2.0]), demo: Samples(vec![3.0]), ..Default::default() };
        mine.add_micro_batches(vec![Samples(vec![0.1, 0.2, 0.3])]);
        mine.add_micro_batches(vec![Samples(vec![0.4])]);
        // Rank 0 appends every rank's bytes, its own included: each set
        // gathers both ranks' series of that set.
        let mut all = ComputeCosts::default();
        append(&mut all, &encode(&mine));
        append(&mut all, &encode(&mine));
        assert_eq!(all.adamw.0, [1.0, 2.0, 1.0, 2.0]);
        assert_eq!((all.demo.0.len(), all.outer.0.len()), (2, 0));
        // Pooled set by set: both ranks' first sets, then their second.
        assert_eq!(all.micro_batch().0, [0.1, 0.2, 0.3, 0.1, 0.2, 0.3, 0.4, 0.4]);
        let lens: Vec<Vec<usize>> =
            all.micro_batch_sets.iter().map(|set| set.iter().map(|s| s.0.len()).collect()).collect();
        assert_eq!(lens, [vec![3, 3], vec![1, 1]]);
    }
}
