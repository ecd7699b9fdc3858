//! Writing a scenario's report: its time series as CSV, its chart as SVG, and a Markdown
//! summary that embeds the chart.

pub mod csv;
pub mod markdown;
pub mod svg;

use crate::error::SimError;
use crate::scenario::ScenarioReport;
use std::path::{Path, PathBuf};

/// Where outputs go unless told otherwise (ignored by version control).
pub const DEFAULT_OUT_DIR: &str = "simulations/out";

/// Writes `<scenario>.csv`, `<scenario>.svg` and `<scenario>.md` into `dir` (created if
/// missing) and returns their paths.
pub fn write_report(report: &ScenarioReport, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
    std::fs::create_dir_all(dir).map_err(|source| SimError::Io {
        path: dir.display().to_string(),
        source,
    })?;
    let name = &report.scenario;
    let files = [
        (format!("{name}.csv"), csv::to_csv(&report.series)),
        (
            format!("{name}.svg"),
            svg::plot(&report.chart, &report.series),
        ),
        (format!("{name}.md"), markdown::summary(report)),
    ];
    let mut paths = Vec::new();
    for (file, text) in files {
        let path = dir.join(file);
        std::fs::write(&path, text).map_err(|source| SimError::Io {
            path: path.display().to_string(),
            source,
        })?;
        paths.push(path);
    }
    Ok(paths)
}
