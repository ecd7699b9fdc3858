//! What `ApplyPolicy` puts in the replicated log: a policy validated once where the request
//! arrived, written back in its own canonical form; a document that fails validation is
//! never proposed.

mod service_support;

use leasehold_allocator::replica::{LocalReplica, Replica, ReplicaError};
use leasehold_allocator::service::{AdminServer, SingleNode};
use leasehold_allocator::state::{AllocatorState, StateCommand};
use leasehold_common::ledger::LedgerConfig;
use leasehold_common::policy::Policy;
use leasehold_common::time::WallClock;
use leasehold_proto::leasehold::v1 as pb;
use leasehold_proto::leasehold::v1::admin_service_server::AdminService;
use leasehold_proto::transport::{AuthMode, PeerIdentity, Role};
use std::sync::{Arc, Mutex};

/// A replica that records every command proposed to it.
#[derive(Clone)]
struct Recording {
    inner: LocalReplica<AllocatorState>,
    proposed: Arc<Mutex<Vec<StateCommand>>>,
}

impl Replica<AllocatorState> for Recording {
    async fn propose(
        &self,
        command: StateCommand,
    ) -> Result<<AllocatorState as leasehold_allocator::replica::Machine>::Output, ReplicaError>
    {
        self.proposed.lock().unwrap().push(command.clone());
        self.inner.propose(command).await
    }

    async fn read<R, F>(&self, f: F) -> Result<R, ReplicaError>
    where
        R: Send + 'static,
        F: FnOnce(&AllocatorState) -> R + Send + 'static,
    {
        self.inner.read(f).await
    }

    fn peek<R>(&self, f: impl FnOnce(&AllocatorState) -> R) -> Option<R> {
        self.inner.peek(f)
    }
}

fn server() -> (AdminServer<Recording>, Arc<Mutex<Vec<StateCommand>>>) {
    let proposed = Arc::new(Mutex::new(Vec::new()));
    let replica = Recording {
        inner: LocalReplica::new(
            AllocatorState::new(LedgerConfig::root("global")),
            Arc::new(WallClock),
        ),
        proposed: Arc::clone(&proposed),
    };
    let cluster = Arc::new(SingleNode {
        cluster_id: "global".into(),
        level: "global".into(),
        node_id: 1,
        addr: "127.0.0.1".into(),
    });
    let auth = AuthMode::Insecure {
        assumed: PeerIdentity::new(Role::Admin, "ops").unwrap(),
    };
    (AdminServer::new(replica, auth, cluster), proposed)
}

fn apply(yaml: &str) -> tonic::Request<pb::ApplyPolicyRequest> {
    tonic::Request::new(pb::ApplyPolicyRequest {
        yaml: yaml.into(),
        ..Default::default()
    })
}

#[tokio::test]
async fn the_log_carries_the_policy_as_it_writes_itself() {
    let (admin, proposed) = server();
    let written = "# a comment the log need not carry\n\
        id: api\n\
        dimensions: [{name: tenant}]\n\
        key: [tenant]\n\
        rate: &r {units: 100, per: 1s}\n\
        burst: 200\n\
        description: \"anchors and comments are the author's, not the log's\"\n";
    admin.apply_policy(apply(written)).await.unwrap();
    let proposed = proposed.lock().unwrap().clone();
    let [StateCommand::ApplyPolicy { yaml, .. }] = proposed.as_slice() else {
        panic!("expected one ApplyPolicy, got {proposed:?}");
    };
    let policy = Policy::from_yaml(written).unwrap();
    assert_eq!(yaml, &policy.to_yaml().unwrap());
    assert!(!yaml.contains('#') && !yaml.contains('&'), "{yaml}");
    assert_eq!(Policy::from_yaml(yaml).unwrap(), policy);
}

#[tokio::test]
async fn an_invalid_or_hostile_document_is_refused_before_it_is_proposed() {
    let (admin, proposed) = server();
    let misspelt = service_support::POLICY.replace("burst: 200", "brust: 200");
    let nested = format!(
        "id: api\nrate: {{units: 1, per: 1s}}\ndescription: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    for doc in [misspelt.as_str(), nested.as_str(), "not: [a policy"] {
        let started = std::time::Instant::now();
        let err = admin.apply_policy(apply(doc)).await.unwrap_err();
        assert_eq!(
            err.code(),
            tonic::Code::InvalidArgument,
            "{}",
            err.message()
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
    assert!(
        proposed.lock().unwrap().is_empty(),
        "refused documents reached the log"
    );
}
