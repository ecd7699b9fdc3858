//! Applies scheduled faults to the simulated world and watches the allocator cluster's
//! leadership between steps.

use super::clock::ClockOffsets;
use super::cluster::{allocator_host, leader_of, NodeSlots};
use super::faults::Action;
use super::hosts::agent_host;
use super::region::REGION_HOST;
use super::sockets;
use std::collections::BTreeMap;
use std::time::Duration;

/// A fault as it was applied. Leader crashes and restarts are resolved when they happen:
/// `node` is the Raft node id they hit, `None` when they hit nothing (no leader known,
/// another allocator already down, nothing to restart).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppliedFault {
    pub at_ms: u64,
    pub action: Action,
    pub node: Option<u64>,
}

/// A leader the cluster had from `at_ms` on (milliseconds of simulated time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderTerm {
    pub at_ms: u64,
    pub node: u64,
    pub term: u64,
}

/// The world's fault state. Overlapping faults nest: a link is cut while any fault that cut
/// it lasts, and an allocator host is down from its crash to the next restart.
pub(super) struct World {
    agents: usize,
    allocators: usize,
    /// The hosts agents lease from: cut off together by an agent partition.
    agent_peers: Vec<String>,
    /// Fault count per (host, host) link, keyed with the smaller name first.
    cuts: BTreeMap<(String, String), u32>,
    crashes: Vec<u32>,
    allocator_down: Vec<bool>,
    clocks: ClockOffsets,
    nodes: Option<NodeSlots>,
    pub applied: Vec<AppliedFault>,
    pub leaders: Vec<LeaderTerm>,
}

impl World {
    /// `nodes` is set when the global allocator is a Raft cluster.
    pub fn new(
        agents: usize,
        allocators: usize,
        agent_peers: Vec<String>,
        clocks: ClockOffsets,
        nodes: Option<NodeSlots>,
    ) -> Self {
        World {
            agents,
            allocators,
            agent_peers,
            cuts: BTreeMap::new(),
            crashes: vec![0; agents],
            allocator_down: vec![false; allocators],
            clocks,
            nodes,
            applied: Vec::new(),
            leaders: Vec::new(),
        }
    }

    /// Whether allocator host `index` is running.
    pub fn allocator_up(&self, index: usize) -> bool {
        !self.allocator_down.get(index).copied().unwrap_or(true)
    }

    /// Whether agent `agent`'s software is running.
    pub fn agent_up(&self, agent: usize) -> bool {
        self.crashes.get(agent).is_some_and(|c| *c == 0)
    }

    /// Records the cluster's leader if it changed since the last call.
    pub fn observe_leader(&mut self, at_ms: u64) {
        let Some(leader) = self.leader() else { return };
        let (_, node, term) = leader;
        if self
            .leaders
            .last()
            .is_none_or(|l| (l.node, l.term) != (node, term))
        {
            self.leaders.push(LeaderTerm { at_ms, node, term });
        }
    }

    /// The running leader: (host index, node id, term).
    fn leader(&self) -> Option<(usize, u64, u64)> {
        let nodes = self.nodes.as_ref()?;
        leader_of(&nodes.metrics(|i| self.allocator_up(i)))
    }

    pub fn apply(
        &mut self,
        sim: &mut turmoil::Sim<'_>,
        at_ms: u64,
        action: Action,
        latency_ms_base: u64,
    ) {
        let node = match action {
            Action::Partition { agent } | Action::Repair { agent } if agent < self.agents => {
                let cut = matches!(action, Action::Partition { .. });
                for peer in self.agent_peers.clone() {
                    self.link(sim, agent_host(agent), peer, cut);
                }
                None
            }
            Action::PartitionRegion | Action::RepairRegion => {
                let cut = action == Action::PartitionRegion;
                for i in 0..self.allocators {
                    self.link(sim, REGION_HOST.to_string(), allocator_host(i), cut);
                }
                None
            }
            Action::MaxLatency { latency_ms } => {
                sim.set_max_message_latency(Duration::from_millis(latency_ms.max(latency_ms_base)));
                None
            }
            Action::Crash { agent } if agent < self.agents => {
                self.crashes[agent] += 1;
                if self.crashes[agent] == 1 {
                    sockets::crash(sim, &agent_host(agent));
                }
                None
            }
            Action::Restart { agent } if agent < self.agents => {
                self.crashes[agent] = self.crashes[agent].saturating_sub(1);
                if self.crashes[agent] == 0 {
                    sockets::bounce(sim, &agent_host(agent));
                }
                None
            }
            Action::CrashLeader => self.crash_leader(sim),
            Action::RestartAllocators => self.restart_allocators(sim),
            Action::IsolateAllocator { node } | Action::RejoinAllocator { node }
                if node < self.allocators =>
            {
                let cut = matches!(action, Action::IsolateAllocator { .. });
                for peer in (0..self.allocators).filter(|p| *p != node) {
                    self.link(sim, allocator_host(node), allocator_host(peer), cut);
                }
                Some(node as u64 + 1)
            }
            Action::ClockOffset { agent, offset_ms } => {
                self.clocks.set_ms(agent, offset_ms);
                None
            }
            // An action naming a host the run does not have changes nothing.
            _ => None,
        };
        self.applied.push(AppliedFault {
            at_ms,
            action,
            node,
        });
    }

    /// One allocator down at a time, so a cluster of three keeps its quorum through crashes.
    fn crash_leader(&mut self, sim: &mut turmoil::Sim<'_>) -> Option<u64> {
        if self.allocator_down.iter().any(|d| *d) {
            return None;
        }
        let (index, node, _) = self.leader()?;
        sockets::crash(sim, &allocator_host(index));
        self.allocator_down[index] = true;
        Some(node)
    }

    fn restart_allocators(&mut self, sim: &mut turmoil::Sim<'_>) -> Option<u64> {
        let mut restarted = None;
        for index in 0..self.allocators {
            if self.allocator_down[index] {
                sockets::bounce(sim, &allocator_host(index));
                self.allocator_down[index] = false;
                restarted = Some(index as u64 + 1);
            }
        }
        restarted
    }

    fn link(&mut self, sim: &mut turmoil::Sim<'_>, a: String, b: String, cut: bool) {
        let key = if a <= b { (a, b) } else { (b, a) };
        let count = self.cuts.entry(key.clone()).or_insert(0);
        if cut {
            *count += 1;
            if *count == 1 {
                sim.partition(key.0.as_str(), key.1.as_str());
            }
        } else if *count > 0 {
            *count -= 1;
            if *count == 0 {
                sim.repair(key.0.as_str(), key.1.as_str());
            }
        }
    }
}
