//! What a scenario returns: the promises it checked, headline figures, and a time series
//! with the chart to draw from it.

use crate::promises::{Promise, PromiseLog};
use serde::Serialize;

/// A table of unsigned integers; the first column is the x axis.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Series {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<u64>>,
}

impl Series {
    /// An empty series with these columns.
    pub fn new(columns: &[&str]) -> Self {
        Series {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row; it must have one value per column.
    pub fn push(&mut self, row: Vec<u64>) {
        debug_assert_eq!(row.len(), self.columns.len(), "row width");
        self.rows.push(row);
    }

    /// The index of column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum LineStyle {
    /// Measured values.
    Solid,
    /// Bounds and model predictions.
    Dashed,
}

/// One line of a chart: a column of the series.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChartLine {
    pub column: String,
    pub label: String,
    pub style: LineStyle,
}

/// Lines over the series' x axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub lines: Vec<ChartLine>,
}

impl Chart {
    /// A chart with no lines yet.
    pub fn new(title: &str, x_label: &str, y_label: &str) -> Self {
        Chart {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            lines: Vec::new(),
        }
    }

    /// Adds a line drawn from `column`.
    pub fn line(mut self, column: &str, label: &str, style: LineStyle) -> Self {
        self.lines.push(ChartLine {
            column: column.into(),
            label: label.into(),
            style,
        });
        self
    }
}

/// A headline figure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fact {
    pub name: String,
    pub value: String,
}

/// The outcome of one scenario run.
#[derive(Clone, Debug, Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    pub seed: u64,
    pub title: String,
    /// What the scenario does and what it shows, in a paragraph.
    pub about: String,
    /// The promises this scenario checks.
    pub checked: Vec<Promise>,
    pub promises: PromiseLog,
    pub facts: Vec<Fact>,
    pub series: Series,
    pub chart: Chart,
}

impl ScenarioReport {
    /// A report of `sim` checking every promise, over the standard per-second series.
    pub fn standard(
        sim: &crate::hierarchy::Hierarchy,
        (scenario, seed): (&str, u64),
        title: impl Into<String>,
        about: impl Into<String>,
        chart: Chart,
    ) -> Self {
        ScenarioReport {
            scenario: scenario.into(),
            seed,
            title: title.into(),
            about: about.into(),
            checked: Promise::MODEL.to_vec(),
            promises: sim.promises(),
            facts: Vec::new(),
            series: super::seconds::standard_series(sim),
            chart,
        }
    }

    /// True when no checked promise was broken.
    pub fn passed(&self) -> bool {
        self.promises.is_clean()
    }

    /// Records a headline figure.
    pub fn fact(&mut self, name: &str, value: impl ToString) {
        self.facts.push(Fact {
            name: name.into(),
            value: value.to_string(),
        });
    }

    /// The value of fact `name`, if recorded.
    pub fn fact_value(&self, name: &str) -> Option<&str> {
        self.facts
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.value.as_str())
    }
}

impl ScenarioReport {
    /// Fact `name` as a number, when it is one.
    pub fn fact_u64(&self, name: &str) -> Option<u64> {
        self.fact_value(name)?.parse().ok()
    }
}
