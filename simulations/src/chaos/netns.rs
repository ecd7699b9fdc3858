//! A network namespace for one agent, joined to the host by a veth pair, and a partition
//! of it from the allocators (its packets to their ports dropped, so connections hang as
//! they do behind a real partition rather than being refused).

use super::error::ChaosError;
use std::process::Command;

/// One namespace and its addresses.
pub struct Netns {
    pub name: String,
    host_if: String,
    /// The host's end of the veth pair, where the allocators are reached from inside.
    pub host_ip: String,
    /// The agent's address inside the namespace.
    pub agent_ip: String,
    /// The allocator ports dropped while partitioned.
    blocked: Option<String>,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Why namespaces cannot be used here, if they cannot.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not running as root".into());
    }
    run(&["ip", "netns", "list"])
        .err()
        .map(|e| format!("`ip netns` does not work: {e}"))
        .or_else(|| {
            run(&["iptables", "--version"])
                .err()
                .map(|e| format!("no iptables: {e}"))
        })
}

impl Netns {
    /// Creates a namespace named after this process, so runs side by side do not collide.
    pub fn create() -> Result<Netns, ChaosError> {
        let pid = std::process::id();
        let subnet = pid % 250 + 1;
        let ns = Netns {
            name: format!("lhc{pid}"),
            host_if: format!("lhc{pid}h"),
            host_ip: format!("10.77.{subnet}.1"),
            agent_ip: format!("10.77.{subnet}.2"),
            blocked: None,
        };
        let inner = format!("lhc{pid}a");
        let (host_cidr, agent_cidr) = (format!("{}/24", ns.host_ip), format!("{}/24", ns.agent_ip));
        let steps: [&[&str]; 8] = [
            &["ip", "netns", "add", &ns.name],
            &[
                "ip",
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &inner,
            ],
            &["ip", "link", "set", &inner, "netns", &ns.name],
            &["ip", "addr", "add", &host_cidr, "dev", &ns.host_if],
            &["ip", "link", "set", &ns.host_if, "up"],
            &[
                "ip",
                "netns",
                "exec",
                &ns.name,
                "ip",
                "addr",
                "add",
                &agent_cidr,
                "dev",
                &inner,
            ],
            &[
                "ip", "netns", "exec", &ns.name, "ip", "link", "set", &inner, "up",
            ],
            &[
                "ip", "netns", "exec", &ns.name, "ip", "link", "set", "lo", "up",
            ],
        ];
        for step in steps {
            run(step).map_err(|e| ChaosError::process("netns", e))?;
        }
        Ok(ns)
    }

    fn rule(&self, op: &str, ports: &str) -> Result<(), ChaosError> {
        let args = [
            "ip",
            "netns",
            "exec",
            &self.name,
            "iptables",
            op,
            "OUTPUT",
            "-p",
            "tcp",
            "-d",
            &self.host_ip,
            "-m",
            "multiport",
            "--dports",
            ports,
            "-j",
            "DROP",
        ];
        run(&args).map_err(|e| ChaosError::process("netns", e))
    }

    /// Drops everything the namespace sends to the allocators' `ports`.
    pub fn partition(&mut self, ports: &[u16]) -> Result<(), ChaosError> {
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let ports = ports.join(",");
        self.rule("-I", &ports)?;
        self.blocked = Some(ports);
        Ok(())
    }

    pub fn heal(&mut self) -> Result<(), ChaosError> {
        match self.blocked.take() {
            Some(ports) => self.rule("-D", &ports),
            None => Ok(()),
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "netns", "del", &self.name]);
        let _ = run(&["ip", "link", "del", &self.host_if]);
    }
}
