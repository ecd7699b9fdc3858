//! The allocator's state codec: snapshot bytes from a peer (InstallSnapshot) or from disk.
//! Whatever the bytes, decoding refuses them with an error or yields a state that encodes
//! to bytes decoding to the same state, and encoding that again gives the same bytes (a
//! restored follower writes what it was sent, not something near it). The same holds for
//! the stored snapshot envelope.
#![no_main]

use leasehold_allocator::raft::machine::{decode_snapshot, encode_snapshot};
use leasehold_allocator::state::AllocatorState;
use leasehold_allocator::storage::snapshot::SnapshotBody;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(body) = SnapshotBody::decode(data) {
        let bytes = body.encode().expect("a decoded body encodes");
        assert_eq!(SnapshotBody::decode(&bytes).expect("reads back"), body);
    }
    let Ok(decoded) = decode_snapshot::<AllocatorState>(data) else {
        return;
    };
    let bytes = encode_snapshot(&decoded.machine, decoded.timeline_ns).expect("encodes");
    let again = decode_snapshot::<AllocatorState>(&bytes).expect("its own encoding decodes");
    assert_eq!(again.timeline_ns, decoded.timeline_ns);
    assert_eq!(
        again.machine, decoded.machine,
        "re-encoding changed the state"
    );
    let twice = encode_snapshot(&again.machine, again.timeline_ns).expect("encodes");
    assert_eq!(twice, bytes, "encoding is not a fixed point");
});
