//! The faults a chaos run draws from its seed, and how each is injected and healed on the
//! processes of a [`World`].

use super::agents::Agent;
use super::cluster::ProcCluster;
use super::error::ChaosError;
use super::isolate::NodeIsolation;
use super::netns::Netns;
use super::procs::{Binaries, Signal};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Everything a fault can touch.
pub struct World {
    pub bins: Binaries,
    pub cluster: ProcCluster,
    /// The region cluster leasing from `cluster`, when the run has one.
    pub region: Option<ProcCluster>,
    /// How many agents (the first ones) lease from the region.
    pub region_agents: usize,
    pub agents: Vec<Agent>,
    pub netns: Option<Netns>,
    /// Index of the agent in the namespace, and of the one under libfaketime.
    pub netns_agent: Option<usize>,
    pub faketime_agent: Option<usize>,
    /// The allocator node that can be cut off, and the rules that do it.
    pub isolatable: Option<(u64, NodeIsolation)>,
}

/// One fault and what it hit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Fault {
    /// SIGKILL of the leader, restarted at heal.
    LeaderKill {
        node: u64,
    },
    /// SIGSTOP of the leader, SIGCONT at heal.
    LeaderStop {
        node: u64,
    },
    FollowerKill {
        node: u64,
    },
    /// SIGKILL of two of the three nodes: no quorum until heal restarts them.
    QuorumLoss {
        nodes: [u64; 2],
    },
    AgentKill {
        agent: usize,
    },
    AgentStop {
        agent: usize,
    },
    /// The namespaced agent cut off from every allocator.
    Partition {
        agent: usize,
    },
    /// The faked wall clock of one agent stepped by this many seconds (and left there).
    ClockStep {
        agent: usize,
        step_s: i64,
    },
    /// The faked wall clock of one allocator node (leading or not) stepped by this many
    /// seconds from the real one (and left there).
    NodeClockStep {
        node: u64,
        step_s: i64,
    },
    /// One allocator node (leading or not) cut off from the other nodes, the agents and the
    /// harness: its packets dropped both ways.
    NodePartition {
        node: u64,
    },
    /// SIGKILL of the region's leader, restarted at heal.
    RegionLeaderKill {
        node: u64,
    },
    /// SIGSTOP of the region's leader, SIGCONT at heal.
    RegionLeaderStop {
        node: u64,
    },
    /// SIGKILL of a region follower, restarted at heal.
    RegionFollowerKill {
        node: u64,
    },
}

/// The region's cluster; a region fault is drawn only when there is one.
fn region(world: &mut World) -> Result<&mut ProcCluster, ChaosError> {
    world.region.as_mut().ok_or(ChaosError::InvalidConfig {
        field: "region_nodes",
        reason: "a region fault in a run without a region".into(),
    })
}

/// Draws the next fault; `leader` is the root's node leading now, `region_leader` the
/// region's.
pub fn draw(rng: &mut ChaCha8Rng, world: &World, leader: u64, region_leader: Option<u64>) -> Fault {
    let nodes = world.cluster.nodes.len() as u64;
    let follower = (leader % nodes) + 1;
    let agent = rng.random_range(0..world.agents.len());
    loop {
        match rng.random_range(0..13) {
            0 => return Fault::LeaderKill { node: leader },
            1 => return Fault::LeaderStop { node: leader },
            2 => return Fault::FollowerKill { node: follower },
            3 => {
                return Fault::QuorumLoss {
                    nodes: [leader, follower],
                }
            }
            4 => return Fault::AgentKill { agent },
            5 => return Fault::AgentStop { agent },
            6 => {
                if let Some(agent) = world.netns_agent {
                    return Fault::Partition { agent };
                }
            }
            7 => {
                if let Some(agent) = world.faketime_agent {
                    let step_s = if rng.random_bool(0.5) { -30 } else { 30 };
                    return Fault::ClockStep { agent, step_s };
                }
            }
            8 => {
                if let Some(node) = world.cluster.faketime_node() {
                    let step_s = if rng.random_bool(0.5) { -30 } else { 30 };
                    return Fault::NodeClockStep { node, step_s };
                }
            }
            9 => {
                if let Some((node, _)) = &world.isolatable {
                    return Fault::NodePartition { node: *node };
                }
            }
            10 => {
                if let Some(node) = region_leader {
                    return Fault::RegionLeaderKill { node };
                }
            }
            11 => {
                if let Some(node) = region_leader {
                    return Fault::RegionLeaderStop { node };
                }
            }
            _ => {
                let region_nodes = world.region.as_ref().map_or(0, |r| r.nodes.len() as u64);
                if let (Some(node), true) = (region_leader, region_nodes > 1) {
                    let node = (node % region_nodes) + 1;
                    return Fault::RegionFollowerKill { node };
                }
            }
        }
    }
}

/// The allocators' gRPC ports, as the partition drops them.
fn allocator_ports(cluster: &ProcCluster) -> Vec<u16> {
    cluster.nodes.iter().filter_map(|n| n.grpc_port()).collect()
}

pub fn inject(world: &mut World, fault: &Fault) -> Result<(), ChaosError> {
    match *fault {
        Fault::LeaderKill { node } | Fault::FollowerKill { node } => world.cluster.kill(node),
        Fault::LeaderStop { node } => world.cluster.pause(node)?,
        Fault::QuorumLoss { nodes } => nodes.iter().for_each(|&n| world.cluster.kill(n)),
        Fault::AgentKill { agent } => {
            if let Some(p) = world.agents[agent].proc.take() {
                p.kill();
            }
        }
        Fault::AgentStop { agent } => {
            let a = &mut world.agents[agent];
            if let Some(p) = &a.proc {
                p.signal(Signal::Stop)?;
                a.stopped = true;
            }
        }
        Fault::Partition { .. } => {
            let ports = allocator_ports(&world.cluster);
            if let Some(ns) = world.netns.as_mut() {
                ns.partition(&ports)?;
            }
        }
        Fault::ClockStep { agent, step_s } => world.agents[agent].set_clock_offset_s(step_s)?,
        Fault::NodeClockStep { node, step_s } => world.cluster.set_clock_offset_s(node, step_s)?,
        Fault::NodePartition { .. } => {
            if let Some((_, cut)) = world.isolatable.as_mut() {
                cut.cut()?;
            }
        }
        Fault::RegionLeaderKill { node } | Fault::RegionFollowerKill { node } => {
            region(world)?.kill(node)
        }
        Fault::RegionLeaderStop { node } => region(world)?.pause(node)?,
    }
    Ok(())
}

pub fn heal(world: &mut World, fault: &Fault) -> Result<(), ChaosError> {
    match *fault {
        Fault::LeaderKill { node } | Fault::FollowerKill { node } => world.cluster.launch(node)?,
        Fault::LeaderStop { node } => world.cluster.resume(node)?,
        Fault::QuorumLoss { nodes } => {
            for n in nodes {
                world.cluster.launch(n)?;
            }
        }
        Fault::AgentKill { agent } => world.agents[agent].launch(&world.bins)?,
        Fault::AgentStop { agent } => {
            let a = &mut world.agents[agent];
            if let Some(p) = &a.proc {
                p.signal(Signal::Cont)?;
            }
            a.stopped = false;
        }
        Fault::Partition { .. } => {
            if let Some(ns) = world.netns.as_mut() {
                ns.heal()?;
            }
        }
        Fault::ClockStep { .. } | Fault::NodeClockStep { .. } => {}
        Fault::NodePartition { .. } => {
            if let Some((_, cut)) = world.isolatable.as_mut() {
                cut.heal()?;
            }
        }
        Fault::RegionLeaderKill { node } | Fault::RegionFollowerKill { node } => {
            region(world)?.launch(node)?
        }
        Fault::RegionLeaderStop { node } => region(world)?.resume(node)?,
    }
    Ok(())
}
