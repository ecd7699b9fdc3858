//! What an allocator cluster of the chaos suite is (its name, level, upstream, addresses
//! and Raft timing) and the config file each of its nodes runs from.

use std::path::{Path, PathBuf};

/// The root cluster's name.
pub const ROOT_CLUSTER: &str = "global";
/// The delegated region's cluster name.
pub const REGION_CLUSTER: &str = "region-eu";

/// Where the nodes listen and how their Raft is timed.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// The cluster's name: node `n` is `<name>-<n>`, which is also its certificate's name.
    pub name: String,
    pub nodes: u64,
    /// The cluster above, for a delegated (`level: region`) cluster; empty for the root.
    pub upstream: Vec<String>,
    /// Address the gRPC listeners bind and advertise: `127.0.0.1`, or the host's end of a
    /// namespace's veth pair when an agent in that namespace must reach them (and follow
    /// the leader's advertised address).
    pub listen_ip: String,
    /// The config's `raft:` mapping; None keeps the product defaults, which is what a
    /// failover measurement should see.
    pub raft_yaml: Option<String>,
    pub tick_ms: u64,
    /// libfaketime's shared library, when one node's wall clock is faked, and that node.
    pub faketime: Option<(PathBuf, u64)>,
    /// The node that runs under a user id of its own, so that it can be cut off
    /// ([`super::isolate`]), and that id. The cluster's directory is then handed to that
    /// user (the other nodes, as root, still read and write it).
    pub isolatable: Option<(u64, u32)>,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            name: ROOT_CLUSTER.into(),
            nodes: 3,
            upstream: Vec::new(),
            listen_ip: "127.0.0.1".into(),
            raft_yaml: None,
            tick_ms: 100,
            faketime: None,
            isolatable: None,
        }
    }
}

impl ClusterSpec {
    /// Node `id`'s name, as its certificate, data directory and log are named.
    pub fn node_name(&self, id: u64) -> String {
        format!("{}-{id}", self.name)
    }

    /// The cluster's shared lease-signing key, in its directory.
    pub fn signing_key_file(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}-lease-key.p8", self.name))
    }

    /// Node `id`'s config, given every node's gRPC and HTTP ports.
    pub fn node_yaml(&self, dir: &Path, id: u64, ports: &[(u16, u16)]) -> String {
        let (grpc, http) = ports[id as usize - 1];
        let bootstrap: Vec<String> = ports
            .iter()
            .enumerate()
            .map(|(i, (p, _))| format!("{{id: {}, addr: \"{}:{p}\"}}", i + 1, self.listen_ip))
            .collect();
        let name = self.node_name(id);
        let (c, d) = (dir.join("certs"), dir.join(&name));
        let raft = self
            .raft_yaml
            .as_ref()
            .map_or(String::new(), |r| format!("raft: {r}\n"));
        let upstream = if self.upstream.is_empty() {
            String::new()
        } else {
            let addrs: Vec<String> = self.upstream.iter().map(|a| format!("\"{a}\"")).collect();
            format!("level: region\nupstream: [{}]\n", addrs.join(", "))
        };
        format!(
            "node_id: {id}\ncluster: {cluster}\n{upstream}grpc_addr: {ip}:{grpc}\n\
             http_addr: 127.0.0.1:{http}\nadvertise_addr: {ip}:{grpc}\ndata_dir: {d}\n\
             signing_key: {key}\nbootstrap: [{bootstrap}]\n\
             tls: {{ca: {c}/ca.pem, cert: {c}/allocator-{name}.pem, key: {c}/allocator-{name}-key.pem}}\n\
             {raft}tick_ms: {tick}\n",
            cluster = self.name,
            ip = self.listen_ip,
            d = d.display(),
            key = self.signing_key_file(dir).display(),
            bootstrap = bootstrap.join(", "),
            c = c.display(),
            tick = self.tick_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_node_names_its_cluster_level_and_upstream() {
        let spec = ClusterSpec {
            name: REGION_CLUSTER.into(),
            upstream: vec!["127.0.0.1:7000".into(), "127.0.0.1:7001".into()],
            ..ClusterSpec::default()
        };
        let yaml = spec.node_yaml(Path::new("/d"), 2, &[(1, 2), (3, 4), (5, 6)]);
        assert!(yaml.contains("node_id: 2\ncluster: region-eu\nlevel: region\n"));
        assert!(yaml.contains("upstream: [\"127.0.0.1:7000\", \"127.0.0.1:7001\"]"));
        assert!(yaml.contains("grpc_addr: 127.0.0.1:3\n"));
        assert!(yaml.contains("cert: /d/certs/allocator-region-eu-2.pem"));
        assert!(yaml.contains("signing_key: /d/region-eu-lease-key.p8"));
        let root = ClusterSpec::default().node_yaml(Path::new("/d"), 1, &[(1, 2)]);
        assert!(!root.contains("level:") && !root.contains("upstream:"));
    }
}
