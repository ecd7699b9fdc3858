//! What a command prints: an aligned table for people, JSON for scripts.

use serde_json::Value;

/// One command's result in each form it has.
pub struct Rendered {
    pub text: String,
    pub json: Value,
    /// Rows as CSV, for commands whose result is rows.
    pub csv: Option<String>,
}

impl Rendered {
    pub fn new(text: impl Into<String>, json: Value) -> Rendered {
        Rendered {
            text: text.into(),
            json,
            csv: None,
        }
    }

    pub fn with_csv(mut self, csv: String) -> Rendered {
        self.csv = Some(csv);
        self
    }
}

/// One CSV field, quoted when it holds a separator, a quote or a line break (RFC 4180).
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// A table with left-aligned text columns and right-aligned numeric ones.
pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Table {
        Table {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let numeric: Vec<bool> = (0..cols)
            .map(|i| {
                !self.rows.is_empty()
                    && self.rows.iter().all(|r| {
                        r.get(i).is_some_and(|c| {
                            c.chars()
                                .all(|ch| ch.is_ascii_digit() || matches!(ch, '.' | '%' | '-'))
                        })
                    })
            })
            .collect();
        let mut out = String::new();
        let line = |cells: Vec<&str>, out: &mut String| {
            let parts: Vec<String> = cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if numeric[i] {
                        format!("{c:>w$}", w = widths[i])
                    } else {
                        format!("{c:<w$}", w = widths[i])
                    }
                })
                .collect();
            out.push_str(parts.join("  ").trim_end());
            out.push('\n');
        };
        line(self.headers.clone(), &mut out);
        for row in &self.rows {
            line(row.iter().map(String::as_str).collect(), &mut out);
        }
        out
    }
}

/// Parts per million as a percentage with one decimal.
pub fn pct(ppm: u64) -> String {
    format!("{:.1}%", ppm as f64 / 10_000.0)
}

/// Milli-units per second as units per second, without trailing zeros.
pub fn per_sec(milli: u64) -> String {
    if milli.is_multiple_of(1_000) {
        (milli / 1_000).to_string()
    } else {
        format!("{:.3}", milli as f64 / 1_000.0)
            .trim_end_matches('0')
            .to_string()
    }
}

/// An emergency switch in a few words: `normal`, `fail-open`, `restricted (priority >= 2, 5/s)`.
pub fn emergency_text(e: &leasehold_proto::leasehold::v1::EmergencySwitch) -> String {
    use leasehold_proto::leasehold::v1::EmergencyMode;
    match EmergencyMode::try_from(e.mode) {
        Ok(EmergencyMode::FailOpen) => "fail-open".to_owned(),
        Ok(EmergencyMode::Restricted) => format!(
            "restricted (priority >= {}, {}/s)",
            e.min_priority,
            per_sec(e.restricted_rate_milli_per_sec)
        ),
        _ => "normal".to_owned(),
    }
}

/// An emergency switch for `-o json`.
pub fn emergency_json(e: &leasehold_proto::leasehold::v1::EmergencySwitch) -> Value {
    use leasehold_proto::leasehold::v1::EmergencyMode;
    let mode = match EmergencyMode::try_from(e.mode) {
        Ok(EmergencyMode::FailOpen) => "fail_open",
        Ok(EmergencyMode::Restricted) => "restricted",
        _ => "normal",
    };
    serde_json::json!({
        "mode": mode,
        "min_priority": e.min_priority,
        "restricted_rate_milli_per_sec": e.restricted_rate_milli_per_sec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_text_left_and_numbers_right() {
        let mut t = Table::new(&["NAME", "UNITS"]);
        t.row(vec!["eu".into(), "5".into()]);
        t.row(vec!["us-east".into(), "1200".into()]);
        assert_eq!(
            t.render(),
            "NAME     UNITS\neu           5\nus-east   1200\n"
        );
    }

    #[test]
    fn csv_fields_are_quoted_only_when_needed() {
        assert_eq!(csv_field("api:tenant=acme"), "api:tenant=acme");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn rates_print_without_noise() {
        assert_eq!(per_sec(100_000), "100");
        assert_eq!(per_sec(1_500), "1.5");
        assert_eq!(pct(123_456), "12.3%");
    }
}
