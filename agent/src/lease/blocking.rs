//! Where the lease manager's state-file calls run: tokio's blocking pool, or inline.

thread_local! {
    static INLINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// From now on, state-file calls of lease managers running on this thread run on it instead
/// of tokio's blocking pool. For a deterministic simulation whose hosts all run on one
/// thread: a call on the pool finishes at a moment of real time that the simulated clock
/// cannot order.
pub fn run_blocking_inline_on_this_thread() {
    INLINE.with(|c| c.set(true));
}

/// Runs a blocking store call (a read or a flush) off the async worker threads, or inline
/// where [`run_blocking_inline_on_this_thread`] asked for it.
pub(super) async fn blocking<T, F>(f: F) -> Result<T, tokio::task::JoinError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    if INLINE.with(std::cell::Cell::get) {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_of_a_blocking_call() -> std::thread::ThreadId {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(blocking(|| std::thread::current().id()))
            .unwrap()
    }

    #[test]
    fn calls_leave_the_thread_unless_asked_to_stay_on_it() {
        // Each test runs on its own thread, so the setting does not leak into others.
        let here = std::thread::current().id();
        assert_ne!(thread_of_a_blocking_call(), here);
        run_blocking_inline_on_this_thread();
        assert_eq!(thread_of_a_blocking_call(), here);
    }
}
