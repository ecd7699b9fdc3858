//! A series as CSV: a header of column names, then one line per row.

use crate::scenario::Series;
use std::fmt::Write;

pub fn to_csv(series: &Series) -> String {
    let mut out = series.columns.join(",");
    out.push('\n');
    for row in &series.rows {
        for (i, v) in row.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write!(out, "{v}").expect("writing to a String cannot fail");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_header_and_rows() {
        let mut s = Series::new(&["t_s", "admitted"]);
        s.push(vec![0, 5]);
        s.push(vec![1, 7]);
        assert_eq!(to_csv(&s), "t_s,admitted\n0,5\n1,7\n");
    }
}
