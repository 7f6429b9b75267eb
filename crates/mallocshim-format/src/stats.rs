//! Summary statistics of measurements, shared by the `mallocshim compare` report, the tests and
//! the benches: the one median of the workspace. Pure functions, no I/O.

/// The median; the mean of the two middle values for an even count; None for no values. NaN
/// values sort after every number (`f64::total_cmp`).
pub fn median(v: impl AsRef<[f64]>) -> Option<f64> {
    let v = v.as_ref();
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

/// [`median`], NaN for no values (for tables that print what there is).
pub fn median_or_nan(v: impl AsRef<[f64]>) -> f64 {
    median(v).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median([0.0f64; 0]), None);
        assert_eq!(median(vec![7.0]), Some(7.0));
        assert!(super::median_or_nan(Vec::new()).is_nan());
    }
}
