//! Summary statistics of measurements, shared by the `mallocshim compare` report, the tests and
//! the benches: the one median of the workspace. Pure functions, no I/O.

/// The median; the mean of the two middle values for an even count; None for no values. NaN
/// values sort after every number (`f64::total_cmp`).
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 })
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[7.0]), Some(7.0));
    }
}
