//! Ledger figures of an allocator node, read from its Prometheus endpoint (`/metrics`),
//! the same numbers an operator's scraper sees.

use super::error::LiveError;
use serde::Serialize;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest metrics page read.
const SCRAPE_BYTES_MAX: u64 = 1 << 20;
const SCRAPE_TIMEOUT_MS: u64 = 3_000;

/// One policy's ledger figures on an allocator cluster.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ClusterFigures {
    /// Credit put on lease, renewals included.
    pub granted: u64,
    /// Credit reported spent by the holders.
    pub used: u64,
    /// Credit written off when leases expired unreported: never re-granted.
    pub stranded: u64,
    /// Credit on lease now.
    pub outstanding: u64,
}

impl ClusterFigures {
    /// The figures of the replica furthest along: they only grow as the log is applied,
    /// except `outstanding`, taken from the same replica as `granted`.
    pub fn furthest(self, other: ClusterFigures) -> ClusterFigures {
        if (other.granted, other.stranded) > (self.granted, self.stranded) {
            other
        } else {
            self
        }
    }
}

/// Fetches `http://{addr}/metrics`.
pub async fn fetch_metrics(node: &str, addr: &str) -> Result<String, LiveError> {
    let fail = |reason: String| LiveError::Scrape {
        node: node.to_string(),
        addr: addr.to_string(),
        reason,
    };
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut body = Vec::new();
        stream.take(SCRAPE_BYTES_MAX).read_to_end(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = tokio::time::timeout(Duration::from_millis(SCRAPE_TIMEOUT_MS), fetch)
        .await
        .map_err(|_| fail(format!("no answer within {SCRAPE_TIMEOUT_MS} ms")))?
        .map_err(|e| fail(e.to_string()))?;
    let text = String::from_utf8(body).map_err(|_| fail("response is not UTF-8".into()))?;
    if !text.starts_with("HTTP/1.1 200") {
        let status = text.lines().next().unwrap_or_default().to_string();
        return Err(fail(format!("status line {status:?}")));
    }
    Ok(text)
}

/// The figures of `policy_id` in a metrics page; zero where the node has none (a policy
/// with no keys yet is not listed).
pub fn parse_figures(text: &str, policy_id: &str) -> ClusterFigures {
    let label = format!("{{policy=\"{policy_id}\"}}");
    let value = |name: &str| -> u64 {
        text.lines()
            .filter_map(|line| line.strip_prefix(name))
            .filter_map(|rest| rest.strip_prefix("_total").or(Some(rest)))
            .filter_map(|rest| rest.strip_prefix(label.as_str()))
            .filter_map(|rest| rest.trim().parse::<u64>().ok())
            .next()
            .unwrap_or(0)
    };
    ClusterFigures {
        granted: value("leasehold_credit_granted"),
        used: value("leasehold_credit_used"),
        stranded: value("leasehold_credit_stranded"),
        outstanding: value("leasehold_credit_outstanding"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters_and_gauges_of_one_policy() {
        let page = "# HELP leasehold_credit_stranded Credit written off.\n\
                    # TYPE leasehold_credit_stranded counter\n\
                    leasehold_credit_stranded_total{policy=\"other\"} 9\n\
                    leasehold_credit_stranded_total{policy=\"api\"} 42\n\
                    leasehold_credit_granted_total{policy=\"api\"} 1000\n\
                    leasehold_credit_granted_total_x{policy=\"api\"} 7\n\
                    leasehold_credit_outstanding{policy=\"api\"} 120\n";
        let f = parse_figures(page, "api");
        assert_eq!(
            f,
            ClusterFigures {
                granted: 1_000,
                used: 0,
                stranded: 42,
                outstanding: 120
            }
        );
    }

    #[test]
    fn the_furthest_replica_wins() {
        let a = ClusterFigures {
            granted: 10,
            ..ClusterFigures::default()
        };
        let b = ClusterFigures {
            granted: 12,
            ..ClusterFigures::default()
        };
        assert_eq!(a.furthest(b), b);
        assert_eq!(b.furthest(a), b);
    }
}
