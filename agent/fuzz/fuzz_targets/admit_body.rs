//! The `POST /v1/admit` body, read as the endpoint reads it up to the engine: any bytes are
//! refused with an error or read to a request of 1 to 8 dimensions, and the request written
//! back reads to the same request (so what is logged or forwarded means what was asked).
#![no_main]

use leasehold_agent::api::http::{read_admit_body, HTTP_DIMENSIONS_MAX};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(read) = read_admit_body(data) else {
        return;
    };
    assert!(
        (1..=HTTP_DIMENSIONS_MAX).contains(&read.dimensions),
        "{} dimensions accepted",
        read.dimensions
    );
    let again = read_admit_body(read.canonical.as_bytes()).expect("the written-back body reads");
    assert_eq!(
        again, read,
        "the written-back body reads to another request"
    );
});
