//! A scenario's Markdown summary: what it shows, how to replay it, the promises it checked,
//! its headline figures and its chart.

use crate::promises::Promise;
use crate::scenario::ScenarioReport;
use std::fmt::Write;

pub fn summary(r: &ScenarioReport) -> String {
    let mut md = String::new();
    let w = &mut md;
    let _ = writeln!(w, "# {}\n", r.title);
    let _ = writeln!(w, "{}\n", r.about);
    let _ = writeln!(
        w,
        "Replay: `leasehold-sim run {} --seed {}`\n",
        r.scenario, r.seed
    );
    let _ = writeln!(w, "| Promise | Result | Violations | First |");
    let _ = writeln!(w, "|---|---|---|---|");
    for p in Promise::ALL.iter().filter(|p| r.checked.contains(p)) {
        let n = r.promises.count(*p);
        let result = if n == 0 { "held" } else { "**broken**" };
        let first = r
            .promises
            .first(*p)
            .map_or_else(|| "—".to_string(), |v| v.to_string());
        let _ = writeln!(
            w,
            "| {p} | {result} | {n} | {} |",
            first.replace('|', "\\|")
        );
    }
    let _ = writeln!(w, "\n| Figure | Value |\n|---|---|");
    for f in &r.facts {
        let _ = writeln!(w, "| {} | {} |", f.name, f.value);
    }
    let _ = writeln!(
        w,
        "\n![{}]({}.svg)\n\nData: [{}.csv]({}.csv)",
        r.chart.title, r.scenario, r.scenario, r.scenario
    );
    md
}
