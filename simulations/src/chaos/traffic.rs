//! Traffic counted at the generator: one thread per agent offering admits at a steady pace
//! across the tenants, recording the instant of every admission per tenant and per agent.

use super::http::{AdmitClient, Answer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Offered, admitted, denied and unanswered requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub offered: u64,
    pub admitted: u64,
    pub denied: u64,
    pub failed: u64,
}

/// What the generator saw.
#[derive(Debug)]
pub struct Records {
    pub started: Instant,
    /// Per tenant: nanoseconds since `started` of every admission's answer, in the order
    /// seen.
    pub admitted_ns: Vec<Vec<u64>>,
    /// Per tenant, in the same order: when each admitted request was sent. The agent
    /// decided somewhere between the two.
    pub admitted_sent_ns: Vec<Vec<u64>>,
    /// Per agent: nanoseconds since `started` of every admission.
    pub agent_admitted_ns: Vec<Vec<u64>>,
    /// Per agent: nanoseconds since `started` of every denial.
    pub agent_denied_ns: Vec<Vec<u64>>,
    pub counts: Counts,
}

impl Records {
    /// Admissions fleet-wide, sorted.
    pub fn fleet_ns(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self.admitted_ns.iter().flatten().copied().collect();
        all.sort_unstable();
        all
    }
}

/// The generator's threads, running until [`Generator::stop`].
pub struct Generator {
    pub records: Arc<Mutex<Records>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// A tenant's name in the policy key.
pub fn tenant_name(i: usize) -> String {
    format!("t{i}")
}

impl Generator {
    /// Offers `per_agent_per_sec` admits of `policy` to each agent, tenants drawn from
    /// `seed`.
    pub fn start(
        agents: &[SocketAddr],
        policy: &str,
        tenants: usize,
        per_agent_per_sec: u64,
        seed: u64,
    ) -> Generator {
        let records = Arc::new(Mutex::new(Records {
            started: Instant::now(),
            admitted_ns: vec![Vec::new(); tenants],
            admitted_sent_ns: vec![Vec::new(); tenants],
            agent_admitted_ns: vec![Vec::new(); agents.len()],
            agent_denied_ns: vec![Vec::new(); agents.len()],
            counts: Counts::default(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let pause = Duration::from_nanos(1_000_000_000 / per_agent_per_sec.max(1));
        let threads = agents
            .iter()
            .enumerate()
            .map(|(a, &addr)| {
                let (records, stop, policy) =
                    (Arc::clone(&records), Arc::clone(&stop), policy.to_string());
                let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (a as u64).wrapping_mul(0x9e37));
                std::thread::spawn(move || {
                    let mut client = AdmitClient::new(addr);
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        let tenant = rng.random_range(0..tenants);
                        let sent = Instant::now();
                        let answer = client.admit(&policy, &tenant_name(tenant));
                        record(&records, a, tenant, sent, answer);
                        next += pause;
                        let now = Instant::now();
                        match next.checked_duration_since(now) {
                            Some(wait) => std::thread::sleep(wait),
                            // Behind (a slow answer): carry on from now, no catch-up burst.
                            None => next = now,
                        }
                    }
                })
            })
            .collect();
        Generator {
            records,
            stop,
            threads,
        }
    }

    /// Nanoseconds since the generator started.
    pub fn elapsed_ns(&self) -> u64 {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        r.started.elapsed().as_nanos() as u64
    }

    /// The longest stretch without an admission anywhere in the fleet from `from_ns` until
    /// now, in nanoseconds.
    pub fn fleet_gap_ns(&self, from_ns: u64) -> u64 {
        let r = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let now = r.started.elapsed().as_nanos() as u64;
        let mut recent: Vec<u64> = r
            .admitted_ns
            .iter()
            .flat_map(|at| at[at.partition_point(|&t| t < from_ns)..].iter().copied())
            .collect();
        recent.sort_unstable();
        longest_gap_ns(&recent, from_ns, now)
    }

    /// Stops the threads and hands back the records.
    pub fn stop(self) -> Records {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
        let records = Arc::try_unwrap(self.records).expect("generator threads joined");
        records.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

fn record(records: &Mutex<Records>, agent: usize, tenant: usize, sent: Instant, answer: Answer) {
    let mut r = records.lock().unwrap_or_else(|e| e.into_inner());
    // The answer's arrival stands for the admission in stalls and per-agent counts; the
    // bound is checked over both instants (windows.rs).
    let at = r.started.elapsed().as_nanos() as u64;
    let sent_ns = sent.saturating_duration_since(r.started).as_nanos() as u64;
    r.counts.offered += 1;
    match answer {
        Answer::Admitted => {
            r.counts.admitted += 1;
            r.admitted_ns[tenant].push(at);
            r.admitted_sent_ns[tenant].push(sent_ns);
            r.agent_admitted_ns[agent].push(at);
        }
        Answer::Denied => {
            r.counts.denied += 1;
            r.agent_denied_ns[agent].push(at);
        }
        Answer::Failed => r.counts.failed += 1,
    }
}

/// The longest stretch without an admission in `sorted_ns` between `from_ns` and `to_ns`,
/// in nanoseconds.
pub fn longest_gap_ns(sorted_ns: &[u64], from_ns: u64, to_ns: u64) -> u64 {
    let start = sorted_ns.partition_point(|&t| t < from_ns);
    let mut prev = from_ns;
    let mut gap = 0;
    for &t in sorted_ns[start..].iter().take_while(|&&t| t <= to_ns) {
        gap = gap.max(t - prev);
        prev = t;
    }
    gap.max(to_ns.saturating_sub(prev))
}
