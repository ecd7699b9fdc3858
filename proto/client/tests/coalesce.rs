//! Exact decisions sent in batches: concurrent decisions share calls while calls are out,
//! each still gets its own request's answer, a decision a batch could not place is asked
//! again on its own, an allocator without batches is asked one at a time, and the queue is
//! bounded.

use leasehold_client::{
    batch_outcome, BoxFuture, CoalesceLimits, CoalescingGrantor, Grantor, GrantorError,
};
use leasehold_proto::leasehold::v1 as pb;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;

/// Answers each decision with `remaining` = the number in its key (`u64::MAX` for a word),
/// after `delay`.
#[derive(Default)]
struct StandIn {
    delay: Duration,
    batches: Mutex<Vec<usize>>,
    singles: AtomicUsize,
    /// Answer every batch with UNIMPLEMENTED, as an allocator without batches does.
    no_batches: bool,
    /// The first batch's decisions on keys ending in "!" fail as a follower's would.
    lose_leadership_once: AtomicBool,
}

fn number(r: &pb::DecideRequest) -> u64 {
    r.items[0]
        .key
        .trim_end_matches('!')
        .parse()
        .unwrap_or(u64::MAX)
}

fn decided(r: &pb::DecideRequest) -> pb::DecideResponse {
    pb::DecideResponse {
        admitted: true,
        verdicts: vec![pb::DecideVerdict {
            fits: true,
            remaining: number(r),
            ..Default::default()
        }],
        decided_at_ns: 1,
    }
}

fn refused(code: Code) -> GrantorError {
    GrantorError::Refused {
        code,
        message: "stand-in".into(),
    }
}

impl Grantor for StandIn {
    fn acquire(
        &self,
        _: pb::AcquireRequest,
    ) -> BoxFuture<'_, Result<pb::AcquireResponse, GrantorError>> {
        Box::pin(async { Err(refused(Code::Unimplemented)) })
    }
    fn report(
        &self,
        _: pb::ReportRequest,
    ) -> BoxFuture<'_, Result<pb::ReportResponse, GrantorError>> {
        Box::pin(async { Err(refused(Code::Unimplemented)) })
    }
    fn release(
        &self,
        _: pb::ReleaseRequest,
    ) -> BoxFuture<'_, Result<pb::ReleaseResponse, GrantorError>> {
        Box::pin(async { Err(refused(Code::Unimplemented)) })
    }

    fn decide(
        &self,
        r: pb::DecideRequest,
    ) -> BoxFuture<'_, Result<pb::DecideResponse, GrantorError>> {
        Box::pin(async move {
            self.singles.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(self.delay).await;
            if r.items[0].key == "refuse" {
                return Err(refused(Code::InvalidArgument));
            }
            Ok(decided(&r))
        })
    }

    fn decide_batch(
        &self,
        r: pb::DecideBatchRequest,
    ) -> BoxFuture<'_, Result<pb::DecideBatchResponse, GrantorError>> {
        Box::pin(async move {
            if self.no_batches {
                return Err(refused(Code::Unimplemented));
            }
            self.batches.lock().unwrap().push(r.requests.len());
            tokio::time::sleep(self.delay).await;
            let lose = self.lose_leadership_once.swap(false, Ordering::SeqCst);
            let outcomes = r
                .requests
                .iter()
                .map(|q| {
                    if q.holder_id != r.holder_id && !q.holder_id.is_empty() {
                        return batch_outcome(Err(refused(Code::InvalidArgument)));
                    }
                    if lose && q.items[0].key.ends_with('!') {
                        return batch_outcome(Err(refused(Code::Unavailable)));
                    }
                    batch_outcome(Ok(decided(q)))
                })
                .collect();
            Ok(pb::DecideBatchResponse { outcomes })
        })
    }
}

fn request(key: &str) -> pb::DecideRequest {
    pb::DecideRequest {
        holder_id: "gw".into(),
        items: vec![pb::DecideItem {
            policy_id: "exact".into(),
            key: key.into(),
            units: 1,
        }],
        decision_id: 0,
    }
}

fn coalescing(inner: Arc<StandIn>, limits: CoalesceLimits) -> Arc<CoalescingGrantor> {
    Arc::new(CoalescingGrantor::new(inner, "gw".into(), limits))
}

/// Asks `keys` at once; the answers in the order asked.
async fn ask_all(
    g: &Arc<CoalescingGrantor>,
    keys: Vec<String>,
) -> Vec<Result<pb::DecideResponse, GrantorError>> {
    let calls: Vec<_> = keys
        .into_iter()
        .map(|k| {
            let g = Arc::clone(g);
            tokio::spawn(async move { g.decide(request(&k)).await })
        })
        .collect();
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.unwrap());
    }
    out
}

#[tokio::test]
async fn concurrent_decisions_share_calls_and_keep_their_own_answers() {
    let inner = Arc::new(StandIn {
        delay: Duration::from_millis(20),
        ..Default::default()
    });
    let limits = CoalesceLimits {
        batches_in_flight_max: 2,
        batch_requests_max: 64,
        ..Default::default()
    };
    let g = coalescing(Arc::clone(&inner), limits);
    let answers = ask_all(&g, (0..500).map(|i| i.to_string()).collect()).await;
    for (i, a) in answers.iter().enumerate() {
        let d = a.as_ref().expect("decided");
        assert_eq!(d.verdicts[0].remaining, i as u64, "answer {i} is its own");
    }
    let batches = inner.batches.lock().unwrap().clone();
    let singles = inner.singles.load(Ordering::SeqCst);
    assert_eq!(
        batches.iter().sum::<usize>() + singles,
        500,
        "{batches:?} + {singles}"
    );
    assert!(batches.iter().all(|n| *n <= 64), "{batches:?}");
    assert!(
        batches.len() + singles < 50,
        "500 decisions took {} batches and {singles} single calls",
        batches.len()
    );
}

#[tokio::test]
async fn a_lone_decision_leaves_at_once_in_a_call_of_its_own() {
    let inner = Arc::new(StandIn::default());
    let g = coalescing(Arc::clone(&inner), CoalesceLimits::default());
    for i in 0..3u64 {
        let d = g.decide(request(&i.to_string())).await.unwrap();
        assert_eq!(d.verdicts[0].remaining, i);
    }
    assert_eq!(inner.singles.load(Ordering::SeqCst), 3);
    assert!(inner.batches.lock().unwrap().is_empty());
}

#[tokio::test]
async fn decisions_a_batch_could_not_place_are_asked_again_and_refusals_stay() {
    let inner = Arc::new(StandIn {
        delay: Duration::from_millis(20),
        lose_leadership_once: AtomicBool::new(true),
        ..Default::default()
    });
    let limits = CoalesceLimits {
        batches_in_flight_max: 1,
        ..Default::default()
    };
    let g = coalescing(Arc::clone(&inner), limits);
    // The first decision occupies the only call; the rest wait and leave as one batch.
    let first = {
        let g = Arc::clone(&g);
        tokio::spawn(async move { g.decide(request("0")).await })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let keys = vec!["1".into(), "2!".into(), "refuse".into(), "3!".into()];
    let answers = ask_all(&g, keys).await;
    assert_eq!(first.await.unwrap().unwrap().verdicts[0].remaining, 0);
    assert_eq!(answers[0].as_ref().unwrap().verdicts[0].remaining, 1);
    assert_eq!(
        answers[1].as_ref().unwrap().verdicts[0].remaining,
        2,
        "asked again"
    );
    assert_eq!(
        answers[3].as_ref().unwrap().verdicts[0].remaining,
        3,
        "asked again"
    );
    // The stand-in refuses "refuse" only as a single call; in the batch it was decided.
    assert_eq!(answers[2].as_ref().unwrap().verdicts[0].remaining, u64::MAX);
    assert_eq!(inner.batches.lock().unwrap().as_slice(), &[4]);
    assert_eq!(
        inner.singles.load(Ordering::SeqCst),
        3,
        "the first and the two retried"
    );
}

#[tokio::test]
async fn an_allocator_without_batches_is_asked_one_decision_at_a_time() {
    let inner = Arc::new(StandIn {
        delay: Duration::from_millis(10),
        no_batches: true,
        ..Default::default()
    });
    let limits = CoalesceLimits {
        batches_in_flight_max: 1,
        ..Default::default()
    };
    let g = coalescing(Arc::clone(&inner), limits);
    let mut keys: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    keys.push("refuse".into());
    let answers = ask_all(&g, keys).await;
    for (i, a) in answers.iter().take(40).enumerate() {
        assert_eq!(a.as_ref().unwrap().verdicts[0].remaining, i as u64);
    }
    assert!(matches!(
        &answers[40],
        Err(GrantorError::Refused {
            code: Code::InvalidArgument,
            ..
        })
    ));
    assert_eq!(inner.singles.load(Ordering::SeqCst), 41);
}

#[tokio::test]
async fn beyond_waiting_max_a_decision_is_refused_at_once() {
    let inner = Arc::new(StandIn {
        delay: Duration::from_millis(200),
        ..Default::default()
    });
    let limits = CoalesceLimits {
        batches_in_flight_max: 1,
        batch_requests_max: 1,
        waiting_max: 4,
    };
    let g = coalescing(Arc::clone(&inner), limits);
    let answers = ask_all(&g, (0..20).map(|i| i.to_string()).collect()).await;
    let exhausted = answers
        .iter()
        .filter(|a| {
            matches!(
                a,
                Err(GrantorError::Refused { code: Code::ResourceExhausted, message })
                    if message.contains("waiting_max")
            )
        })
        .count();
    let decided = answers.iter().filter(|a| a.is_ok()).count();
    assert_eq!(exhausted + decided, 20, "{answers:?}");
    assert!(
        exhausted >= 10,
        "only {exhausted} of 20 refused with a queue of 4"
    );
    assert!(decided >= 4, "{answers:?}");
}

#[tokio::test]
async fn a_decision_whose_caller_gave_up_is_not_sent() {
    let inner = Arc::new(StandIn {
        delay: Duration::from_millis(50),
        ..Default::default()
    });
    let limits = CoalesceLimits {
        batches_in_flight_max: 1,
        ..Default::default()
    };
    let g = coalescing(Arc::clone(&inner), limits);
    let busy = {
        let g = Arc::clone(&g);
        tokio::spawn(async move { g.decide(request("0")).await })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    // Gives up while the only call is out.
    let gave_up = tokio::time::timeout(Duration::from_millis(10), g.decide(request("1"))).await;
    assert!(gave_up.is_err());
    busy.await.unwrap().unwrap();
    let d = g.decide(request("2")).await.unwrap();
    assert_eq!(d.verdicts[0].remaining, 2);
    assert_eq!(
        inner.singles.load(Ordering::SeqCst),
        2,
        "key 1 was never sent"
    );
    assert!(inner.batches.lock().unwrap().is_empty());
}
