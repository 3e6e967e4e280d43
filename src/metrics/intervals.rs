//! Sets of time intervals, kept sorted and disjoint, so that busy time,
//! overlap and idle time are measures of sets rather than sums of spans
//! (two spans on one lane that overlap must not count twice).

/// A finite union of closed intervals `[a, b]` on the real line, stored
/// sorted by start, pairwise disjoint and non-touching, each of positive
/// length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Intervals {
    parts: Vec<(f64, f64)>,
}

impl Intervals {
    /// The union of `intervals` (any order, overlapping or not).
    ///
    /// Intervals of zero or negative length are dropped: they have measure
    /// zero and would only split or bridge nothing. Intervals that touch
    /// (`b == a'`) are joined.
    pub fn from_unsorted(intervals: impl IntoIterator<Item = (f64, f64)>) -> Intervals {
        let mut v: Vec<(f64, f64)> = intervals.into_iter().filter(|&(a, b)| b > a).collect();
        v.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        let mut parts: Vec<(f64, f64)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            match parts.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => parts.push((a, b)),
            }
        }
        Intervals { parts }
    }

    /// The disjoint parts, sorted by start.
    pub fn parts(&self) -> &[(f64, f64)] {
        &self.parts
    }

    /// True when the set has measure zero.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// Total length (Lebesgue measure) of the set.
    pub fn total(&self) -> f64 {
        self.parts.iter().map(|&(a, b)| b - a).sum()
    }

    /// Length of the intersection of two sets, in one linear pass.
    pub fn intersection_len(&self, other: &Intervals) -> f64 {
        let (x, y) = (&self.parts, &other.parts);
        let (mut i, mut j, mut total) = (0, 0, 0.0);
        while i < x.len() && j < y.len() {
            let lo = x[i].0.max(y[j].0);
            let hi = x[i].1.min(y[j].1);
            if hi > lo {
                total += hi - lo;
            }
            // The part that ends first cannot meet anything further on.
            if x[i].1 < y[j].1 {
                i += 1;
            } else {
                j += 1;
            }
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_joins_overlapping_and_touching() {
        let s = Intervals::from_unsorted([(3.0, 5.0), (0.0, 2.0), (1.0, 2.5), (5.0, 6.0), (8.0, 9.0)]);
        assert_eq!(s.parts(), &[(0.0, 2.5), (3.0, 6.0), (8.0, 9.0)]);
        assert_eq!(s.total(), 6.5);
    }

    #[test]
    fn merge_absorbs_nested_intervals() {
        let s = Intervals::from_unsorted([(0.0, 10.0), (2.0, 3.0), (4.0, 5.0)]);
        assert_eq!(s.parts(), &[(0.0, 10.0)]);
    }

    #[test]
    fn merge_drops_empty_intervals() {
        let s = Intervals::from_unsorted([(1.0, 1.0), (2.0, 1.0)]);
        assert!(s.is_empty());
        assert_eq!(s.total(), 0.0);
    }

    #[test]
    fn intersection_of_hand_checked_sets() {
        let compute = Intervals::from_unsorted([(0.0, 2.0), (3.0, 5.0)]);
        let comm = Intervals::from_unsorted([(1.0, 4.0)]);
        assert_eq!(compute.intersection_len(&comm), 2.0);
        assert_eq!(comm.intersection_len(&compute), 2.0);
    }

    #[test]
    fn intersection_with_disjoint_or_empty_is_zero() {
        let a = Intervals::from_unsorted([(0.0, 1.0), (2.0, 3.0)]);
        let b = Intervals::from_unsorted([(1.0, 2.0), (3.0, 4.0)]);
        assert_eq!(a.intersection_len(&b), 0.0);
        assert_eq!(a.intersection_len(&Intervals::default()), 0.0);
    }

    #[test]
    fn intersection_with_itself_is_total() {
        let a = Intervals::from_unsorted([(0.0, 1.5), (2.0, 3.0), (7.0, 7.25)]);
        assert_eq!(a.intersection_len(&a), a.total());
    }
}
