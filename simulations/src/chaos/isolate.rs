//! Cutting one allocator node off from everyone, on one host: the node runs under a user id
//! of its own, and iptables drops every packet that user's processes send and every packet
//! sent to the node's gRPC port (which also carries its Raft traffic). Connections hang, as
//! behind a real partition, rather than being refused.

use super::error::ChaosError;
use std::process::Command;

/// The user id the isolatable node runs as (`nobody` on Debian).
pub const ISOLATED_UID: u32 = 65_534;

/// The iptables rules that cut one node off, while they are in place.
pub struct NodeIsolation {
    uid: u32,
    grpc_port: u16,
    active: bool,
}

fn iptables(args: &[String]) -> Result<(), ChaosError> {
    let out = Command::new("iptables")
        .args(args)
        .output()
        .map_err(ChaosError::io("iptables"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(ChaosError::process(
        "iptables",
        format!(
            "iptables {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
    ))
}

impl NodeIsolation {
    /// Rules for the node running as `uid` and listening on `grpc_port`; nothing is cut yet.
    pub fn new(uid: u32, grpc_port: u16) -> NodeIsolation {
        NodeIsolation {
            uid,
            grpc_port,
            active: false,
        }
    }

    fn rules(&self) -> [Vec<String>; 2] {
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let uid = self.uid.to_string();
        let port = self.grpc_port.to_string();
        [
            s(&["OUTPUT", "-m", "owner", "--uid-owner", &uid, "-j", "DROP"]),
            s(&["INPUT", "-p", "tcp", "--dport", &port, "-j", "DROP"]),
        ]
    }

    fn apply(&self, op: &str) -> Result<(), ChaosError> {
        for rule in self.rules() {
            let mut args = vec![op.to_string()];
            args.extend(rule);
            iptables(&args)?;
        }
        Ok(())
    }

    /// Cuts the node off; cutting it twice changes nothing.
    pub fn cut(&mut self) -> Result<(), ChaosError> {
        if !self.active {
            self.apply("-I")?;
            self.active = true;
        }
        Ok(())
    }

    /// Lets the node's traffic through again.
    pub fn heal(&mut self) -> Result<(), ChaosError> {
        if self.active {
            self.active = false;
            self.apply("-D")?;
        }
        Ok(())
    }
}

impl Drop for NodeIsolation {
    /// A run that ends or fails mid-partition leaves no rule behind.
    fn drop(&mut self) {
        let _ = self.heal();
    }
}
